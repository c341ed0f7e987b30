// JSON from untrusted bytes (request bodies, other servers' answers), in time linear in the
// input and with every failure a value, never an exception.
//
// nlohmann::ordered_json keeps keys in the order they came (chat templates render tool
// schemas in that order), but its object is a vector searched from the front on every
// insertion: parse() of an object with n keys costs n^2/2 string comparisons (100,000 keys
// in a 1 MB body: 22 s). parse_json() builds the same value through the SAX interface,
// appending each key after one hash lookup for duplicates (the last value of a duplicated
// key wins, as with parse()).
//
// Failures (as a message with the byte offset, 1-based, just past the offending character):
// malformed JSON, invalid UTF-8 or unpaired surrogates in strings, numbers outside a double's
// range (1e400, or 400 digits), nesting deeper than max_depth.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace sluice {

struct JsonLimits {
  int max_depth = 64;
  // A key twice in one object is a failure rather than the last value winning: a request whose
  // "stream" or "prompt" comes twice means something different to each reader of it.
  bool reject_duplicate_keys = false;
};

struct JsonError {
  size_t byte = 0;      // 1-based offset just past the bad character; 0: not positional
  std::string message;  // without the offset
  bool duplicate_key = false;  // valid JSON (RFC 8259 allows it) refused by reject_duplicate_keys
};

std::expected<nlohmann::ordered_json, JsonError> parse_json(std::string_view text, JsonLimits limits = {});

}  // namespace sluice
