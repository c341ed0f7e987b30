#include "tokenizer/byte_level.h"

#include <array>

#include "common/utf8.h"

namespace sluice {
namespace {

bool is_printable_byte(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<char32_t, 256> byte_to_cp{};
  std::array<int16_t, 512> cp_to_byte{};  // every code point of the alphabet is below U+0200
};

Tables build_tables() {
  Tables t;
  t.cp_to_byte.fill(-1);
  char32_t next_extra = 0x100;
  for (int b = 0; b < 256; ++b) {
    const char32_t cp = is_printable_byte(b) ? static_cast<char32_t>(b) : next_extra++;
    t.byte_to_cp[b] = cp;
    t.cp_to_byte[cp] = static_cast<int16_t>(b);
  }
  return t;
}

const Tables& tables() {
  static const Tables kTables = build_tables();
  return kTables;
}

}  // namespace

char32_t byte_to_unicode(uint8_t b) { return tables().byte_to_cp[b]; }

int unicode_to_byte(char32_t cp) {
  return cp < tables().cp_to_byte.size() ? tables().cp_to_byte[cp] : -1;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) utf8_append(byte_to_unicode(static_cast<uint8_t>(c)), out);
  return out;
}

std::string byte_level_to_bytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const Utf8Char c = utf8_decode(text.substr(pos));
    if (c.status != Utf8Status::kValid) {
      out.push_back(text[pos]);
      ++pos;
      continue;
    }
    const int b = unicode_to_byte(c.code_point);
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
    } else {
      out.append(text.substr(pos, c.length));
    }
    pos += c.length;
  }
  return out;
}

}  // namespace sluice
