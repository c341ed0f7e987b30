#include "eval/yaml_json.h"

#include <charconv>
#include <cstdlib>
#include <cmath>
#include <limits>

#include <yaml-cpp/yaml.h>

namespace sluice::eval {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// [-+]?[0-9]+
bool is_int(std::string_view s) {
  size_t i = !s.empty() && (s[0] == '-' || s[0] == '+');
  if (i == s.size()) return false;
  for (; i < s.size(); ++i) {
    if (!is_digit(s[i])) return false;
  }
  return true;
}

// [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
bool is_float(std::string_view s) {
  size_t i = !s.empty() && (s[0] == '-' || s[0] == '+');
  size_t int_digits = 0, frac_digits = 0;
  while (i < s.size() && is_digit(s[i])) ++i, ++int_digits;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && is_digit(s[i])) ++i, ++frac_digits;
  }
  if (int_digits == 0 && frac_digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    size_t exp_digits = 0;
    while (i < s.size() && is_digit(s[i])) ++i, ++exp_digits;
    if (exp_digits == 0) return false;
  }
  return i == s.size();
}

// A decimal that is_int or is_float accepted. Out of double's range it is +-inf or 0, as Python's
// float() and YAML readers give, never an exception.
double to_double(const std::string& s) { return std::strtod(s.c_str(), nullptr); }

// Hex or octal digits; past 64 bits a float, like a decimal past 64 bits.
Json radix_int(const std::string& digits, int base) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v, base);
  if (ec == std::errc() && p == digits.data() + digits.size()) {
    if (v <= static_cast<uint64_t>(INT64_MAX)) return static_cast<int64_t>(v);
    return v;
  }
  double d = 0;
  for (char ch : digits) d = d * base + (is_digit(ch) ? ch - '0' : ch - 'a' + 10);
  return d;
}

Json plain_scalar(const std::string& s) {
  const std::string l = lower(s);
  if (s.empty() || s == "~" || l == "null") return nullptr;
  if (l == "true") return true;
  if (l == "false") return false;
  if (is_int(s)) {
    int64_t v = 0;
    const char* b = s.data() + (s[0] == '+');
    if (auto [p, ec] = std::from_chars(b, s.data() + s.size(), v); ec == std::errc() && p == s.data() + s.size()) return v;
    uint64_t u = 0;
    if (auto [p, ec] = std::from_chars(b, s.data() + s.size(), u); ec == std::errc() && p == s.data() + s.size()) return u;
    return to_double(s);  // beyond 64 bits: a float, as YAML readers do
  }
  if (l.starts_with("0x") && l.size() > 2 && l.find_first_not_of("0123456789abcdef", 2) == std::string::npos) {
    return radix_int(l.substr(2), 16);
  }
  if (l.starts_with("0o") && l.size() > 2 && l.find_first_not_of("01234567", 2) == std::string::npos) {
    return radix_int(l.substr(2), 8);
  }
  if (is_float(s)) return to_double(s);
  if (l == ".inf" || l == "+.inf") return std::numeric_limits<double>::infinity();
  if (l == "-.inf") return -std::numeric_limits<double>::infinity();
  if (l == ".nan") return std::numeric_limits<double>::quiet_NaN();
  return s;
}

Result<Json> convert(const YAML::Node& node, int depth) {
  if (depth > 128) return Error(StatusCode::kInvalid, "YAML nested deeper than 128 levels");
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      return Json(nullptr);
    case YAML::NodeType::Scalar:
      // "!" is the tag yaml-cpp gives quoted and block scalars: always strings.
      return node.Tag() == "!" ? Json(node.Scalar()) : plain_scalar(node.Scalar());
    case YAML::NodeType::Sequence: {
      Json a = Json::array();
      for (const YAML::Node& item : node) {
        SLUICE_ASSIGN_OR_RETURN(Json v, convert(item, depth + 1));
        a.push_back(std::move(v));
      }
      return a;
    }
    case YAML::NodeType::Map: {
      Json o = Json::object();
      Json merged = Json::object();  // from merge keys: explicit keys win, then earlier merges
      for (const auto& kv : node) {
        if (!kv.first.IsScalar()) {
          return Error(StatusCode::kInvalid, "line {}: a mapping key must be a scalar", kv.first.Mark().line + 1);
        }
        const std::string& key = kv.first.Scalar();
        SLUICE_ASSIGN_OR_RETURN(Json v, convert(kv.second, depth + 1));
        if (key == "<<" && kv.first.Tag() != "!") {  // a merge key (<<: *defaults), as YAML 1.1 has it
          const Json maps = v.is_array() ? v : Json::array({v});
          for (const Json& m : maps) {
            if (!m.is_object()) {
              return Error(StatusCode::kInvalid, "line {}: a merge key (<<) takes a mapping or a list of them",
                           kv.first.Mark().line + 1);
            }
            for (auto it = m.begin(); it != m.end(); ++it) {
              if (!merged.contains(it.key())) merged[it.key()] = it.value();
            }
          }
          continue;
        }
        if (o.contains(key)) {
          return Error(StatusCode::kInvalid, "line {}: key '{}' appears twice in one mapping", kv.first.Mark().line + 1, key);
        }
        o[key] = std::move(v);
      }
      for (auto it = merged.begin(); it != merged.end(); ++it) {
        if (!o.contains(it.key())) o[it.key()] = it.value();
      }
      return o;
    }
  }
  return Json(nullptr);
}

}  // namespace

Result<Json> parse_yaml(std::string_view text) {
  try {
    const YAML::Node root = YAML::Load(std::string(text));
    return convert(root, 0);
  } catch (const YAML::Exception& e) {
    return Error(StatusCode::kInvalid, "line {}, column {}: {}", e.mark.line + 1, e.mark.column + 1, e.msg);
  }
}

}  // namespace sluice::eval
