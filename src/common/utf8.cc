#include "common/utf8.h"

namespace sluice {
namespace {

// Range the second byte of a sequence must lie in, given the lead byte. Later continuation
// bytes are always 0x80..0xBF. This is Table 3-7 of the Unicode standard, which excludes
// overlongs (E0 80.., F0 80..), surrogates (ED A0..) and values above U+10FFFF (F4 90..).
struct SecondByteRange {
  uint8_t lo;
  uint8_t hi;
};

SecondByteRange second_byte_range(uint8_t lead) {
  switch (lead) {
    case 0xE0: return {0xA0, 0xBF};
    case 0xED: return {0x80, 0x9F};
    case 0xF0: return {0x90, 0xBF};
    case 0xF4: return {0x80, 0x8F};
    default: return {0x80, 0xBF};
  }
}

}  // namespace

int utf8_sequence_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xC2) return 0;  // continuation byte, or overlong lead C0/C1
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  if (lead < 0xF5) return 4;
  return 0;
}

Utf8Char utf8_decode(std::string_view s) {
  const auto lead = static_cast<uint8_t>(s[0]);
  const int len = utf8_sequence_length(lead);
  if (len == 1) return {lead, 1, Utf8Status::kValid};
  if (len == 0) return {kReplacementChar, 1, Utf8Status::kInvalid};

  char32_t cp = lead & (0xFF >> (len + 1));
  for (int i = 1; i < len; ++i) {
    if (static_cast<size_t>(i) >= s.size()) {
      return {kReplacementChar, static_cast<int>(s.size()), Utf8Status::kIncomplete};
    }
    const auto byte = static_cast<uint8_t>(s[i]);
    const SecondByteRange range = i == 1 ? second_byte_range(lead) : SecondByteRange{0x80, 0xBF};
    if (byte < range.lo || byte > range.hi) return {kReplacementChar, i, Utf8Status::kInvalid};
    cp = (cp << 6) | (byte & 0x3F);
  }
  return {cp, len, Utf8Status::kValid};
}

void utf8_append(char32_t cp, std::string& out) {
  if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) cp = kReplacementChar;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string utf8_encode(char32_t cp) {
  std::string out;
  utf8_append(cp, out);
  return out;
}

size_t utf8_valid_prefix_length(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    if (static_cast<uint8_t>(s[pos]) < 0x80) {  // ASCII fast path
      ++pos;
      continue;
    }
    const Utf8Char c = utf8_decode(s.substr(pos));
    if (c.status != Utf8Status::kValid) break;
    pos += c.length;
  }
  return pos;
}

bool utf8_is_valid(std::string_view s) { return utf8_valid_prefix_length(s) == s.size(); }

size_t utf8_incomplete_suffix_length(std::string_view s) {
  // An incomplete sequence is at most 3 bytes (a 4-byte sequence missing its last byte).
  // Try the longest candidate first: its lead byte must start a sequence that runs to the end.
  for (size_t k = s.size() < 3 ? s.size() : 3; k >= 1; --k) {
    const Utf8Char c = utf8_decode(s.substr(s.size() - k));
    if (c.status == Utf8Status::kIncomplete) return k;
  }
  return 0;
}

void utf8_sanitize_append(std::string_view s, std::string& out) {
  out.reserve(out.size() + s.size());
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t valid = utf8_valid_prefix_length(s.substr(pos));
    out.append(s.substr(pos, valid));
    pos += valid;
    if (pos == s.size()) break;
    const Utf8Char c = utf8_decode(s.substr(pos));
    out.append(kReplacementUtf8);
    pos += c.length;
  }
}

std::string utf8_sanitize(std::string_view s) {
  std::string out;
  utf8_sanitize_append(s, out);
  return out;
}

std::string terminal_safe(std::string_view s, bool keep_lines) {
  const std::string clean = utf8_sanitize(s);
  std::string out;
  out.reserve(clean.size());
  static constexpr char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < clean.size(); ++i) {
    const auto c = static_cast<unsigned char>(clean[i]);
    if ((c < 0x20 && c != '\t' && !(c == '\n' && keep_lines)) || c == 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else if (c == 0xc2 && i + 1 < clean.size() && static_cast<unsigned char>(clean[i + 1]) < 0xa0) {
      const auto next = static_cast<unsigned char>(clean[++i]);  // U+0080..U+009F: C1 controls
      out += "\\u{";
      out += kHex[next >> 4];
      out += kHex[next & 15];
      out += '}';
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace sluice
