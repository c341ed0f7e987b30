// Python str semantics over UTF-8 bytes, for the interpreter and the builtins: lengths,
// indices and slices count code points; strip/split know Python's whitespace set; case
// mapping covers ASCII and Latin-1 (other scripts pass through unchanged, a documented
// difference from Python's full Unicode tables).
//
// Invalid UTF-8 (possible in template literals) counts one code point per maximal invalid
// subpart, the way common/utf8.h decodes it. All functions are pure.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::chat {

// Byte offset of each code point of `s`, then s.size().
std::vector<size_t> code_point_offsets(std::string_view s);
size_t code_point_length(std::string_view s);
bool is_ascii(std::string_view s);

// Python slice.indices(): the element indices a[start:stop:step] selects. REQUIRES: step != 0.
std::vector<size_t> slice_indices(size_t length, std::optional<int64_t> start, std::optional<int64_t> stop,
                                  int64_t step);

// str.strip()/lstrip()/rstrip(); `chars` absent: Python whitespace. Characters are code points.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split(sep, maxsplit); sep absent: runs of whitespace, no empty strings. REQUIRES: sep != "".
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
// str.splitlines(): split at \n, \r, \r\n, \v, \f, \x1c-\x1e, U+0085, U+2028, U+2029; no ends kept.
std::vector<std::string> py_splitlines(std::string_view s);
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_capitalize(std::string_view s);  // first upper, rest lower
std::string py_title(std::string_view s);       // str.title(): after any non-letter
std::string jinja_title(std::string_view s);    // the |title filter: after space - ( { [ <
// str.replace(from, to, count); count < 0: all. nullopt when the result exceeds max_bytes.
std::optional<std::string> py_replace(std::string_view s, std::string_view from, std::string_view to,
                                      int64_t count, size_t max_bytes);

}  // namespace sluice::chat
