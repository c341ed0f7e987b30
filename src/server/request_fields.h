// Typed access to the fields of a request body, as the OpenAI API's parsers read them: null
// counts as absent, a wrong type or a value out of range is a 400 naming the field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/openai_protocol.h"

namespace sluice::server {

// The field, or null when it is absent or null.
const Json* field(const Json& body, const char* key);
// "'KEY' must be EXPECTED, got TYPE", naming the field.
ApiError wrong_type(std::string_view key, const char* expected, const Json& got);
// An integer written as a float (5.0, 1e1) counts as that integer, as Python clients (and
// pydantic, so vLLM) take it; 2.5 does not.
bool is_integral(const Json& v);
// An integer in [min, max] (integers past 64 bits arrive as floats: out of range).
ApiResult<std::optional<int64_t>> get_int(const Json& body, const char* key, int64_t min, int64_t max);
ApiResult<std::optional<double>> get_number(const Json& body, const char* key);
// A number in [min, max] (min_open: (min, max]).
ApiResult<std::optional<double>> get_number_in(const Json& body, const char* key, double min, double max,
                                               bool min_open = false);
ApiResult<std::optional<bool>> get_bool(const Json& body, const char* key);
ApiResult<std::optional<std::string>> get_string(const Json& body, const char* key);
// An array of token ids, each in [0, 2^31).
ApiResult<std::vector<int32_t>> token_array(const Json& v, const char* key);

}  // namespace sluice::server
