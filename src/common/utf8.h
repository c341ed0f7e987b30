// UTF-8 helpers: decode one code point, encode one, find the valid prefix and an incomplete
// tail, and replace invalid bytes with U+FFFD.
//
// Invalid input follows the Unicode "maximal subpart" practice (Unicode 15, section 3.9,
// U+FFFD substitution): each maximal prefix of a would-be sequence that cannot be completed
// is one error and becomes one U+FFFD; the byte that broke it starts the next attempt. So
// "\xE2\x82A" is U+FFFD then "A", and "\xFF\xFF" is two U+FFFD. Overlongs, surrogates
// (U+D800..U+DFFF) and code points above U+10FFFF are invalid.
//
// All functions are pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sluice {

inline constexpr char32_t kReplacementChar = 0xFFFD;
inline constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";

enum class Utf8Status {
  kValid,       // a complete, well-formed sequence
  kInvalid,     // can never become valid, whatever follows
  kIncomplete,  // a well-formed start cut off by the end of the input
};

struct Utf8Char {
  char32_t code_point = kReplacementChar;  // U+FFFD unless status == kValid
  int length = 0;                          // bytes consumed, >= 1 (see utf8_decode)
  Utf8Status status = Utf8Status::kInvalid;
};

// Decodes the sequence at the start of `s`. length is the whole sequence when valid, the
// maximal subpart (>= 1 byte) when invalid, and all of `s` when incomplete.
// REQUIRES: !s.empty().
Utf8Char utf8_decode(std::string_view s);

// Bytes a sequence starting with `lead` has (1..4), or 0 when `lead` cannot start one.
int utf8_sequence_length(uint8_t lead);

// Appends the UTF-8 form of `cp`; a surrogate or a value above U+10FFFF appends U+FFFD.
void utf8_append(char32_t cp, std::string& out);
std::string utf8_encode(char32_t cp);

// Length of the longest prefix of `s` that is valid UTF-8.
size_t utf8_valid_prefix_length(std::string_view s);
bool utf8_is_valid(std::string_view s);

// Number of trailing bytes of `s` (0..3) that form an incomplete but possibly valid sequence:
// the bytes a streaming decoder must hold back until more input arrives.
size_t utf8_incomplete_suffix_length(std::string_view s);

// `s` with every invalid maximal subpart (and an incomplete tail) replaced by U+FFFD.
std::string utf8_sanitize(std::string_view s);
void utf8_sanitize_append(std::string_view s, std::string& out);

// `s` as a terminal may show it: sanitized as above, and every control character but tab (C0,
// DEL, C1: escape sequences, a title, a cursor move) written as \xNN or \u{NN}, so text read
// from a file can neither restyle the terminal nor forge a line of output; newlines too, unless
// `keep_lines` (a message of several lines).
std::string terminal_safe(std::string_view s, bool keep_lines = false);

}  // namespace sluice
