#include "server/request_fields.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace sluice::server {

const Json* field(const Json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

ApiError wrong_type(std::string_view key, const char* expected, const Json& got) {
  return ApiError::invalid(fmt::format("'{}' must be {}, got {}", key, expected, json_type_name(got)), std::string(key));
}

bool is_integral(const Json& v) {
  if (v.is_number_integer()) return true;
  if (!v.is_number_float()) return false;
  const double d = v.get<double>();
  return std::isfinite(d) && d == std::floor(d);
}

ApiResult<std::optional<int64_t>> get_int(const Json& body, const char* key, int64_t min, int64_t max) {
  const Json* v = field(body, key);
  if (!v) return std::nullopt;
  if (!is_integral(*v)) return std::unexpected(wrong_type(key, "an integer", *v));
  auto out_of_range = [&] {
    return ApiError::invalid(fmt::format("'{}' must be in [{}, {}], got {}", key, min, max, v->dump()), key);
  };
  int64_t x = 0;
  if (v->is_number_unsigned()) {
    if (v->get<uint64_t>() > static_cast<uint64_t>(max)) return std::unexpected(out_of_range());
    x = static_cast<int64_t>(v->get<uint64_t>());
  } else if (v->is_number_integer()) {
    x = v->get<int64_t>();
  } else {
    // Integers past 64 bits arrive as floats too (JSON has one number type), rounded: one just
    // below -2^63 becomes -2^63, so a float is taken only strictly inside the int64 range.
    const double d = v->get<double>();
    if (d < static_cast<double>(min) || d > static_cast<double>(max) || d <= -0x1p63 || d >= 0x1p63) {
      return std::unexpected(out_of_range());
    }
    x = static_cast<int64_t>(d);
  }
  if (x < min || x > max) {
    return std::unexpected(ApiError::invalid(fmt::format("'{}' must be in [{}, {}], got {}", key, min, max, x), key));
  }
  return x;
}

ApiResult<std::optional<double>> get_number(const Json& body, const char* key) {
  const Json* v = field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) return std::unexpected(wrong_type(key, "a number", *v));
  return v->get<double>();
}

ApiResult<std::optional<double>> get_number_in(const Json& body, const char* key, double min, double max,
                                               bool min_open) {
  auto x = get_number(body, key);
  if (!x || !*x) return x;
  const double v = **x;
  if (!(min_open ? v > min : v >= min) || !(v <= max)) {
    return std::unexpected(ApiError::invalid(
        fmt::format("'{}' must be in {}{}, {}], got {}", key, min_open ? "(" : "[", min, max, v), key));
  }
  // Sampling runs in 32-bit floats: 1e-300 is 0 there, which an open bound excludes too.
  if (min_open && !(static_cast<float>(v) > static_cast<float>(min))) {
    return std::unexpected(ApiError::invalid(
        fmt::format("'{}' must be in ({}, {}], got {}, which is {} as a 32-bit float", key, min, max, v,
                    static_cast<float>(v)),
        key));
  }
  return x;
}

ApiResult<std::optional<bool>> get_bool(const Json& body, const char* key) {
  const Json* v = field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) return std::unexpected(wrong_type(key, "a boolean", *v));
  return v->get<bool>();
}

ApiResult<std::optional<std::string>> get_string(const Json& body, const char* key) {
  const Json* v = field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) return std::unexpected(wrong_type(key, "a string", *v));
  return v->get<std::string>();
}

ApiResult<std::vector<int32_t>> token_array(const Json& v, const char* key) {
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const Json& t = v[i];
    // An integer written as a float (1.0, 1e1) is one, as in every integer field.
    const double d = is_integral(t) ? t.get<double>() : -1;
    if (d < 0 || d > std::numeric_limits<int32_t>::max()) {
      return std::unexpected(ApiError::invalid(
          fmt::format("'{}' token at index {} must be a non-negative integer token id, got {}", key, i,
                      t.is_number() ? t.dump() : json_type_name(t)),
          key));
    }
    ids.push_back(static_cast<int32_t>(d));
  }
  return ids;
}

}  // namespace sluice::server
