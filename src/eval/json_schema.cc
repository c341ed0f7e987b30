#include "eval/json_schema.h"

#include <cmath>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <fmt/format.h>

namespace sluice::eval {
namespace {

#define RETURN_IF_FAILED(expr)        \
  do {                                \
    Status failed_ = (expr);          \
    if (!failed_) return failed_;     \
  } while (0)

std::string type_of(const Json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_array()) return "array";
  return "object";
}

bool has_type(const Json& v, const std::string& t) {
  if (t == "integer") {
    return v.is_number_integer() || (v.is_number_float() && std::isfinite(v.get<double>()) && std::floor(v.get<double>()) == v.get<double>());
  }
  return type_of(v) == t;
}

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

struct Validator {
  const Json& root;
  int depth = 0;

  Status fail(const std::string& at, const std::string& what) const {
    return Status::error(fmt::format("{}: {}", at.empty() ? "/" : at, what));
  }
  static Status bad_schema(const std::string& what) { return Status::error("invalid schema: " + what, StatusCode::kInvalid); }

  Result<const Json*> resolve(const std::string& ref) const {
    for (const auto& [prefix, key] : {std::pair{"#/$defs/", "$defs"}, std::pair{"#/definitions/", "definitions"}}) {
      if (ref.starts_with(prefix)) {
        const std::string name = ref.substr(std::string_view(prefix).size());
        if (root.contains(key) && root[key].contains(name)) return &root[key][name];
      }
    }
    return Error(StatusCode::kInvalid, "invalid schema: $ref '{}' does not name a definition of this schema", ref);
  }

  Status check(const Json& v, const Json& s, const std::string& at) {
    if (++depth > 64) return bad_schema("nested deeper than 64 levels (a $ref cycle?)");
    Status st = check_inner(v, s, at);
    --depth;
    return st;
  }

  Status check_inner(const Json& v, const Json& s, const std::string& at) {
    if (s.is_boolean()) return s.get<bool>() ? Status::ok() : fail(at, "no value is allowed here");
    if (!s.is_object()) return bad_schema("a schema must be an object or a boolean");
    for (auto it = s.begin(); it != s.end(); ++it) {
      const std::string& k = it.key();
      const Json& x = it.value();
      if (k == "type") {
        const Json types = x.is_array() ? x : Json::array({x});
        bool ok = false;
        for (const Json& t : types) {
          if (!t.is_string()) return bad_schema("'type' must be a string or a list of strings");
          ok = ok || has_type(v, t.get<std::string>());
        }
        if (!ok) return fail(at, fmt::format("expected {}, got {}", x.is_array() ? x.dump() : x.get<std::string>(), type_of(v)));
      } else if (k == "enum") {
        if (!x.is_array()) return bad_schema("'enum' must be a list");
        if (std::find(x.begin(), x.end(), v) == x.end()) return fail(at, fmt::format("{} is not one of {}", v.dump(), x.dump()));
      } else if (k == "const") {
        if (v != x) return fail(at, fmt::format("expected {}, got {}", x.dump(), v.dump()));
      } else if (k == "properties") {
        if (!x.is_object()) return bad_schema("'properties' must be an object");
        if (!v.is_object()) continue;
        for (auto p = x.begin(); p != x.end(); ++p) {
          if (v.contains(p.key())) RETURN_IF_FAILED(check(v[p.key()], p.value(), at + "/" + p.key()));
        }
      } else if (k == "required") {
        if (!x.is_array()) return bad_schema("'required' must be a list");
        if (!v.is_object()) continue;
        for (const Json& name : x) {
          if (!name.is_string()) return bad_schema("'required' must list strings");
          if (!v.contains(name.get<std::string>())) return fail(at, fmt::format("'{}' is required", name.get<std::string>()));
        }
      } else if (k == "additionalProperties") {
        if (!v.is_object()) continue;
        const Json props = s.value("properties", Json::object());
        for (auto p = v.begin(); p != v.end(); ++p) {
          if (props.contains(p.key())) continue;
          if (x.is_boolean() && !x.get<bool>()) return fail(at, fmt::format("property '{}' is not allowed", p.key()));
          RETURN_IF_FAILED(check(p.value(), x, at + "/" + p.key()));
        }
      } else if (k == "items" || k == "prefixItems") {
        if (!v.is_array()) continue;
        if (k == "prefixItems") {
          if (!x.is_array()) return bad_schema("'prefixItems' must be a list");
          for (size_t i = 0; i < x.size() && i < v.size(); ++i) RETURN_IF_FAILED(check(v[i], x[i], fmt::format("{}/{}", at, i)));
        } else {
          const size_t first = s.contains("prefixItems") && s["prefixItems"].is_array() ? s["prefixItems"].size() : 0;
          for (size_t i = first; i < v.size(); ++i) RETURN_IF_FAILED(check(v[i], x, fmt::format("{}/{}", at, i)));
        }
      } else if (k == "minItems" || k == "maxItems") {
        if (!x.is_number_unsigned() && !x.is_number_integer()) return bad_schema(fmt::format("'{}' must be an integer", k));
        if (!v.is_array()) continue;
        const auto n = static_cast<int64_t>(v.size());
        if (k == "minItems" ? n < x.get<int64_t>() : n > x.get<int64_t>()) {
          return fail(at, fmt::format("{} items, {} {}", n, k == "minItems" ? "at least" : "at most", x.get<int64_t>()));
        }
      } else if (k == "uniqueItems") {
        if (!v.is_array() || !x.is_boolean() || !x.get<bool>()) continue;
        for (size_t i = 0; i < v.size(); ++i) {
          for (size_t j = i + 1; j < v.size(); ++j) {
            if (v[i] == v[j]) return fail(at, fmt::format("items {} and {} are equal", i, j));
          }
        }
      } else if (k == "minLength" || k == "maxLength") {
        if (!x.is_number_integer()) return bad_schema(fmt::format("'{}' must be an integer", k));
        if (!v.is_string()) continue;
        const auto n = static_cast<int64_t>(code_points(v.get<std::string>()));
        if (k == "minLength" ? n < x.get<int64_t>() : n > x.get<int64_t>()) {
          return fail(at, fmt::format("length {}, {} {}", n, k == "minLength" ? "at least" : "at most", x.get<int64_t>()));
        }
      } else if (k == "pattern") {
        if (!x.is_string()) return bad_schema("'pattern' must be a string");
        if (!v.is_string()) continue;
        auto m = regex_search(x.get<std::string>(), v.get<std::string>());
        if (!m) return bad_schema(m.error().message());
        if (!*m) return fail(at, fmt::format("does not match /{}/", x.get<std::string>()));
      } else if (k == "minimum" || k == "maximum" || k == "exclusiveMinimum" || k == "exclusiveMaximum" || k == "multipleOf") {
        if (!x.is_number()) return bad_schema(fmt::format("'{}' must be a number", k));
        if (!v.is_number()) continue;
        const double a = v.get<double>(), b = x.get<double>();
        const bool ok = k == "minimum" ? a >= b : k == "maximum" ? a <= b : k == "exclusiveMinimum" ? a > b
                        : k == "exclusiveMaximum" ? a < b : (b > 0 && std::fabs(std::remainder(a, b)) < 1e-9 * std::max(1.0, std::fabs(a)));
        if (!ok) return fail(at, fmt::format("{} fails {} {}", v.dump(), k, x.dump()));
      } else if (k == "anyOf" || k == "oneOf" || k == "allOf") {
        if (!x.is_array() || x.empty()) return bad_schema(fmt::format("'{}' must be a non-empty list", k));
        int passed = 0;
        Status first;
        for (const Json& sub : x) {
          Status st = check(v, sub, at);
          if (st.code() == StatusCode::kInvalid) return st;
          if (st) ++passed;
          else if (first) first = st;
          if (k == "allOf" && !st) return st;
        }
        if (k == "anyOf" && passed == 0) return fail(at, "matches none of anyOf (" + first.message() + ")");
        if (k == "oneOf" && passed != 1) return fail(at, fmt::format("matches {} of oneOf, not exactly one", passed));
      } else if (k == "not") {
        Status st = check(v, x, at);
        if (st.code() == StatusCode::kInvalid) return st;
        if (st) return fail(at, "matches the schema under 'not'");
      } else if (k == "$ref") {
        if (!x.is_string()) return bad_schema("'$ref' must be a string");
        auto target = resolve(x.get<std::string>());
        if (!target) return target.error();
        RETURN_IF_FAILED(check(v, **target, at));
      } else if (k == "title" || k == "description" || k == "examples" || k == "$schema" || k == "$id" || k == "$defs" ||
                 k == "definitions" || k == "default" || k == "$comment" || k == "format") {
        // annotations (format is an annotation by default in 2020-12)
      } else {
        return bad_schema(fmt::format("keyword '{}' is not supported", k));
      }
    }
    return Status::ok();
  }
};

}  // namespace

Status validate_json(const Json& value, const Json& schema) {
  Validator v{schema};
  return v.check(value, schema, "");
}

Result<bool> regex_search(const std::string& pattern, const std::string& text, bool ignore_case) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                 PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (ignore_case ? PCRE2_CASELESS : 0), &err, &offset,
                                 nullptr);
  if (!re) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    return Error(StatusCode::kInvalid, "regex /{}/ at offset {}: {}", pattern, offset, reinterpret_cast<char*>(msg));
  }
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(re, nullptr);
  pcre2_match_context* mc = pcre2_match_context_create(nullptr);
  pcre2_set_match_limit(mc, 10'000'000);
  const int rc = pcre2_match(re, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0, 0, md, mc);
  pcre2_match_context_free(mc);
  pcre2_match_data_free(md);
  pcre2_code_free(re);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) return Error(StatusCode::kInvalid, "regex /{}/: matching failed (error {}, a match limit?)", pattern, rc);
  return true;
}

}  // namespace sluice::eval
