// GPT-2 byte-level alphabet: every byte gets a printable code point, so that byte-level BPE
// vocabularies can store arbitrary byte strings as text.
//
// Printable bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) map to the code point of the same
// value; the other 68 bytes map, in increasing byte order, to U+0100, U+0101, ... (so the
// space 0x20 is U+0120 'Ġ' and the newline 0x0A is U+010A 'Ċ'). This is the mapping
// `bytes_to_unicode` of OpenAI's GPT-2 encoder, which every byte-level BPE vocabulary uses.
//
// Pure functions over constant tables; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace sluice {

// The code point byte `b` is written as.
char32_t byte_to_unicode(uint8_t b);
// The byte that code point `cp` stands for, or -1 when `cp` is not in the alphabet.
int unicode_to_byte(char32_t cp);

// Raw bytes -> byte-level text (each byte becomes one code point, UTF-8 encoded).
std::string bytes_to_byte_level(std::string_view bytes);
// Byte-level text -> raw bytes. A code point outside the alphabet (some vocabularies hold
// such tokens) is copied through as its UTF-8 bytes; invalid UTF-8 is copied byte by byte.
std::string byte_level_to_bytes(std::string_view text);

}  // namespace sluice
