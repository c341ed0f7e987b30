#include "chat/jinja_text.h"

#include <algorithm>

#include "chat/unicode_case.h"
#include "common/utf8.h"

namespace sluice::chat {
namespace {

// Python's str.isspace() set.
bool is_py_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

struct CodePoint {
  char32_t cp;
  size_t begin;
  size_t end;
};

std::vector<CodePoint> decode_all(std::string_view s) {
  std::vector<CodePoint> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      out.push_back({c, i, i + 1});
      ++i;
      continue;
    }
    const Utf8Char ch = utf8_decode(s.substr(i));
    out.push_back({ch.status == Utf8Status::kValid ? ch.code_point : kReplacementChar, i, i + ch.length});
    i += ch.length;
  }
  return out;
}

enum class Case { kUpper, kLower, kTitle, kKeep };

char ascii_case(char c, Case to) {
  if (to == Case::kLower) return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c;
  if (to == Case::kUpper || to == Case::kTitle) return c >= 'a' && c <= 'z' ? static_cast<char>(c - 32) : c;
  return c;
}

// Σ lowers to ς at the end of a word: after a cased letter and before none (Python's rule,
// skipping case-ignorable characters both ways).
bool final_sigma(const std::vector<CodePoint>& cps, size_t i, size_t from = 0) {
  size_t j = i;
  while (j > from && is_case_ignorable(cps[j - 1].cp)) --j;
  if (j == from || !is_cased(cps[j - 1].cp)) return false;
  size_t k = i + 1;
  while (k < cps.size() && is_case_ignorable(cps[k].cp)) ++k;
  return k == cps.size() || !is_cased(cps[k].cp);
}

// Maps each code point to the case `to_case(index, code point)` says. The final-sigma rule
// looks back no further than *lower_from, where given: the start of the piece Python lowers.
template <typename Fn>
std::string map_case(std::string_view s, Fn to_case, const size_t* lower_from = nullptr) {
  if (is_ascii(s)) {
    std::string out(s);
    for (size_t i = 0; i < out.size(); ++i) out[i] = ascii_case(out[i], to_case(i, static_cast<char32_t>(out[i])));
    return out;
  }
  std::string out;
  out.reserve(s.size());
  const std::vector<CodePoint> cps = decode_all(s);
  for (size_t i = 0; i < cps.size(); ++i) {
    const char32_t cp = cps[i].cp;
    const Case to = to_case(i, cp);
    CaseMapping m;
    m.cp[0] = cp;
    if (to == Case::kUpper) m = upper_case(cp);
    if (to == Case::kTitle) m = title_case(cp);
    if (to == Case::kLower) m = cp == 0x3A3 && final_sigma(cps, i, lower_from ? *lower_from : 0) ? CaseMapping{{0x3C2, 0, 0}, 1} : lower_case(cp);
    if (m.n == 1 && m.cp[0] == cp) {
      out.append(s.substr(cps[i].begin, cps[i].end - cps[i].begin));
    } else {
      for (int k = 0; k < m.n; ++k) utf8_append(m.cp[k], out);
    }
  }
  return out;
}

}  // namespace

bool is_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

std::vector<size_t> code_point_offsets(std::string_view s) {
  std::vector<size_t> offsets;
  if (is_ascii(s)) {
    offsets.resize(s.size() + 1);
    for (size_t i = 0; i <= s.size(); ++i) offsets[i] = i;
    return offsets;
  }
  for (const CodePoint& c : decode_all(s)) offsets.push_back(c.begin);
  offsets.push_back(s.size());
  return offsets;
}

size_t code_point_length(std::string_view s) {
  if (is_ascii(s)) return s.size();
  return decode_all(s).size();
}

std::vector<size_t> slice_indices(size_t length, std::optional<int64_t> start, std::optional<int64_t> stop,
                                  int64_t step) {
  const int64_t len = static_cast<int64_t>(length);
  auto clamp = [&](std::optional<int64_t> v, int64_t if_absent, int64_t lo, int64_t hi) {
    if (!v) return if_absent;
    int64_t x = *v;
    if (x < 0) x += len;
    return std::clamp(x, lo, hi);
  };
  std::vector<size_t> out;
  if (step > 0) {
    const int64_t b = clamp(start, 0, 0, len);
    const int64_t e = clamp(stop, len, 0, len);
    // (Steps checked before they are taken: i + step may pass INT64_MAX.)
    for (int64_t i = b; i < e; i += step) {
      out.push_back(static_cast<size_t>(i));
      if (step >= e - i) break;
    }
  } else {
    const int64_t b = clamp(start, len - 1, -1, len - 1);
    const int64_t e = clamp(stop, -1, -1, len - 1);
    for (int64_t i = b; i > e; i += step) {
      out.push_back(static_cast<size_t>(i));
      if (step <= e - i) break;
    }
  }
  return out;
}

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  const std::vector<CodePoint> cps = decode_all(s);
  std::vector<char32_t> set;
  if (chars) {
    for (const CodePoint& c : decode_all(*chars)) set.push_back(c.cp);
  }
  auto strip_it = [&](char32_t cp) {
    return chars ? std::find(set.begin(), set.end(), cp) != set.end() : is_py_space(cp);
  };
  size_t b = 0;
  size_t e = cps.size();
  if (left) {
    while (b < e && strip_it(cps[b].cp)) ++b;
  }
  if (right) {
    while (e > b && strip_it(cps[e - 1].cp)) --e;
  }
  if (b == e) return {};
  return std::string(s.substr(cps[b].begin, cps[e - 1].end - cps[b].begin));
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      const size_t hit = s.find(*sep, pos);
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, hit - pos));
      pos = hit + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  const std::vector<CodePoint> cps = decode_all(s);
  size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && is_py_space(cps[i].cp)) ++i;
    if (i == cps.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      size_t e = cps.size();
      while (e > i && is_py_space(cps[e - 1].cp)) --e;
      out.emplace_back(s.substr(cps[i].begin, cps[e - 1].end - cps[i].begin));
      break;
    }
    const size_t b = i;
    while (i < cps.size() && !is_py_space(cps[i].cp)) ++i;
    out.emplace_back(s.substr(cps[b].begin, cps[i - 1].end - cps[b].begin));
  }
  return out;
}

std::vector<std::string> py_splitlines(std::string_view s) {
  std::vector<std::string> out;
  size_t start = 0, i = 0;
  while (i < s.size()) {
    const unsigned char c = s[i];
    size_t len = 0;  // the line boundary's bytes at i
    if (c == '\r') {
      len = i + 1 < s.size() && s[i + 1] == '\n' ? 2 : 1;
    } else if (c == '\n' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E)) {
      len = 1;
    } else if (c == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x85) {
      len = 2;
    } else if (c == 0xE2 && i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x80 &&
               (static_cast<unsigned char>(s[i + 2]) == 0xA8 || static_cast<unsigned char>(s[i + 2]) == 0xA9)) {
      len = 3;
    }
    if (len == 0) {
      ++i;
      continue;
    }
    out.emplace_back(s.substr(start, i - start));
    i += len;
    start = i;
  }
  if (start < s.size()) out.emplace_back(s.substr(start));
  return out;
}

std::string py_upper(std::string_view s) {
  return map_case(s, [](size_t, char32_t) { return Case::kUpper; });
}
std::string py_lower(std::string_view s) {
  return map_case(s, [](size_t, char32_t) { return Case::kLower; });
}
std::string py_capitalize(std::string_view s) {
  // Python 3.8 and later: the first character in title case ("ǆx" -> "ǅx"), the rest lower.
  return map_case(s, [](size_t i, char32_t) { return i == 0 ? Case::kTitle : Case::kLower; });
}

std::string py_title(std::string_view s) {
  bool prev_cased = false;
  return map_case(s, [&](size_t, char32_t cp) {
    const Case to = prev_cased ? Case::kLower : Case::kTitle;
    prev_cased = is_cased(cp);
    return to;
  });
}

std::string jinja_title(std::string_view s) {
  // jinja2's do_title: split on runs of [-\s({[<], then item[0].upper() + item[1:].lower().
  // item[1:] is lowered on its own: a Σ right after the word's first letter is not final.
  bool word_start = true;
  size_t lower_from = 0;
  return map_case(
      s,
      [&](size_t i, char32_t cp) {
        const bool boundary = is_py_space(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
        const Case to = boundary ? Case::kKeep : (word_start ? Case::kUpper : Case::kLower);
        if (!boundary && word_start) lower_from = i + 1;
        word_start = boundary;
        return to;
      },
      &lower_from);
}

std::optional<std::string> py_replace(std::string_view s, std::string_view from, std::string_view to,
                                      int64_t count, size_t max_bytes) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` before every code point and at the end.
    const std::vector<size_t> offsets = code_point_offsets(s);
    int64_t done = 0;
    for (size_t i = 0; i + 1 < offsets.size(); ++i) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      out.append(s.substr(offsets[i], offsets[i + 1] - offsets[i]));
      if (out.size() > max_bytes) return std::nullopt;
    }
    if (count < 0 || done < count) out += to;
    if (out.size() > max_bytes) return std::nullopt;
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out += to;
    if (out.size() > max_bytes) return std::nullopt;
    pos = hit + from.size();
    ++done;
  }
  out.append(s.substr(pos));
  if (out.size() > max_bytes) return std::nullopt;
  return out;
}

}  // namespace sluice::chat
