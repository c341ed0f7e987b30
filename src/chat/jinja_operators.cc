#include "chat/jinja_operators.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "chat/jinja_builtins.h"
#include "chat/jinja_text.h"
#include "common/utf8.h"

namespace sluice::chat {
namespace {

std::unexpected<Status> undefined_error(const Value& a, const Value& b) {
  return Error("{}", (a.is_undefined() ? a : b).undefined_hint());
}

std::unexpected<Status> type_error(std::string_view op, const Value& a, const Value& b) {
  if (a.is_undefined() || b.is_undefined()) return undefined_error(a, b);
  return Error("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(), b.type_name());
}

Result<Value> repeat(const Value& seq, int64_t n, const SizeLimits& limits) {
  if (n < 0) n = 0;
  // Nothing repeated is nothing, at once (not n empty steps: n may be 2^63 - 1).
  if ((seq.is_string() && seq.as_string().empty()) || (!seq.is_string() && seq.as_list().items.empty())) n = 0;
  if (seq.is_string()) {
    const size_t len = seq.as_string().size();
    if (len > 0 && static_cast<uint64_t>(n) > limits.max_string_bytes / len) {
      return Error("string longer than the limit of {} bytes", limits.max_string_bytes);
    }
    std::string out;
    out.reserve(len * n);
    for (int64_t i = 0; i < n; ++i) out += seq.as_string();
    return Value::string(std::move(out));
  }
  const auto& items = seq.as_list().items;
  if (!items.empty() && static_cast<uint64_t>(n) > limits.max_list_items / items.size()) {
    return Error("list longer than the limit of {} items", limits.max_list_items);
  }
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value::list(std::move(out), seq.as_list().is_tuple);
}

Result<Value> int_pow(int64_t base, int64_t exp) {
  if (exp < 0) return Value::floating(std::pow(static_cast<double>(base), static_cast<double>(exp)));
  int64_t result = 1;
  while (exp > 0) {
    if (exp & 1) {
      if (__builtin_mul_overflow(result, base, &result)) return Error("integer overflow in '**'");
    }
    exp >>= 1;
    if (exp > 0 && __builtin_mul_overflow(base, base, &base)) return Error("integer overflow in '**'");
  }
  return Value::integer(result);
}

// One conversion of Python's printf-style formatting: %[flags][width][.precision]type.
struct Conversion {
  std::string flags;  // of "-+ 0#"
  int width = 0;
  int precision = -1;  // none
  char type = 's';
  bool has(char flag) const { return flags.find(flag) != std::string::npos; }
};

// Code points of UTF-8 text (each byte that does not continue a sequence).
size_t code_points(std::string_view s) {
  return static_cast<size_t>(
      std::ranges::count_if(s, [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

// `body` padded to the width: on the right with '-', else on the left, with zeros after the
// sign and prefix where '0' asks (numbers only).
std::string pad(const Conversion& c, std::string_view sign, std::string_view body, bool number) {
  const size_t length = sign.size() + code_points(body);
  const size_t fill = static_cast<size_t>(c.width) > length ? static_cast<size_t>(c.width) - length : 0;
  std::string out;
  out.reserve(fill + sign.size() + body.size());
  const bool left = c.has('-'), zeros = number && c.has('0') && !left;
  if (!left && !zeros) out.append(fill, ' ');
  out.append(sign);
  if (zeros) out.append(fill, '0');
  out.append(body);
  if (left) out.append(fill, ' ');
  return out;
}

Result<std::string> format_one(const Conversion& c, const Value& v) {
  if (c.type == 's' || c.type == 'r') {
    std::string text;
    c.type == 's' ? append_str(v, text) : append_repr(v, text);
    if (c.precision >= 0) {  // the first `precision` code points
      size_t at = 0;
      for (int n = 0; at < text.size() && n < c.precision; ++n) {
        do ++at;
        while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80);
      }
      text.resize(at);
    }
    return pad(c, "", text, false);
  }
  if (c.type == 'c') {
    if (v.is_string() && code_points(v.as_string()) == 1) return pad(c, "", v.as_string(), false);
    if (!(v.is_int() || v.is_bool()) || v.as_int() < 0 || v.as_int() > 0x10FFFF) {
      return Error("%c requires an int in range(0x110000) or a char");
    }
    std::string one;
    utf8_append(static_cast<char32_t>(v.as_int()), one);
    return pad(c, "", one, false);
  }
  if (!v.is_number()) return Error("%{} format: a real number is required, not {}", c.type, v.type_name());
  if (std::string_view("diouxX").find(c.type) != std::string_view::npos) {
    if (v.is_float() && std::string_view("oxX").find(c.type) != std::string_view::npos) {
      return Error("%{} format: an integer is required, not float", c.type);
    }
    if (v.is_float() && !std::isfinite(v.as_float())) {
      return Error("cannot convert float {} to integer", std::isnan(v.as_float()) ? "NaN" : "infinity");
    }
    // int(x): toward zero; past int64 as Python would need a big integer, which sluice has not.
    const double f = v.is_float() ? std::trunc(v.as_float()) : 0;
    if (v.is_float() && !(f >= -9.2e18 && f <= 9.2e18)) return Error("integer too large to format");
    const int64_t n = v.is_float() ? static_cast<int64_t>(f) : v.as_int();
    const uint64_t magnitude = n < 0 ? 0 - static_cast<uint64_t>(n) : static_cast<uint64_t>(n);
    const int base = c.type == 'o' ? 8 : (c.type == 'x' || c.type == 'X') ? 16 : 10;
    char digits[32];
    std::string body(digits, std::to_chars(digits, digits + sizeof digits, magnitude, base).ptr);
    if (c.type == 'X')
      std::ranges::transform(body, body.begin(), [](char d) { return static_cast<char>(std::toupper(d)); });
    if (c.precision > static_cast<int>(body.size())) {
      body = std::string(static_cast<size_t>(c.precision) - body.size(), '0') + body;
    }
    std::string sign = n < 0 ? "-" : c.has('+') ? "+" : c.has(' ') ? " " : "";
    if (c.has('#') && base != 10) sign += c.type == 'o' ? "0o" : c.type == 'x' ? "0x" : "0X";
    return pad(c, sign, body, true);
  }
  // f F e E g G: C's printf gives Python's digits (both correctly rounded); inf and nan as Python
  // writes them (zero-padded where asked, no sign on a NaN).
  if (const double x = v.as_float(); !std::isfinite(x)) {
    const bool upper = std::isupper(static_cast<unsigned char>(c.type));
    const std::string body = std::isnan(x) ? (upper ? "NAN" : "nan") : (upper ? "INF" : "inf");
    const std::string sign = x < 0 ? "-" : c.has('+') ? "+" : c.has(' ') ? " " : "";
    return pad(c, sign, body, true);
  }
  const std::string spec =
      fmt::format("%{}{}{}{}", c.flags, c.width, c.precision >= 0 ? fmt::format(".{}", c.precision) : "", c.type);
  const int size = std::snprintf(nullptr, 0, spec.c_str(), v.as_float());
  std::string out(static_cast<size_t>(std::max(size, 0)), '\0');
  std::snprintf(out.data(), out.size() + 1, spec.c_str(), v.as_float());
  return out;
}

// "%s" % value: Python's printf-style formatting (%[flags][width][.precision]type, types s r c
// d i o u x X e E f F g G, and %%; no mapping keys, no '*').
Result<Value> percent_format(const std::string& format, const Value& args, const SizeLimits& limits) {
  std::vector<Value> values;
  if (args.is_list() && args.as_list().is_tuple) {
    values = args.as_list().items;
  } else {
    values.push_back(args);
  }
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out.push_back(format[i]);
      continue;
    }
    Conversion c;
    auto at_end = [&] { return ++i >= format.size(); };
    if (at_end()) return Error("incomplete format");
    if (format[i] == '%') {
      out.push_back('%');
      continue;
    }
    if (format[i] == '(' || format[i] == '*') return Error("unsupported format character '{}'", format[i]);
    for (; std::string_view("-+ 0#").find(format[i]) != std::string_view::npos;) {
      c.flags.push_back(format[i]);
      if (at_end()) return Error("incomplete format");
    }
    auto number = [&](int& n) -> Status {
      for (n = 0; std::isdigit(static_cast<unsigned char>(format[i]));) {
        n = n * 10 + (format[i] - '0');
        if (n > 10000) return Status::error("a width or precision past 10000");
        if (at_end()) return Status::error("incomplete format");
      }
      return Status::ok();
    };
    if (Status s = number(c.width); !s) return Error(s);
    if (format[i] == '.') {
      if (at_end()) return Error("incomplete format");
      if (Status s = number(c.precision); !s) return Error(s);
    }
    c.type = format[i] == 'u' ? 'd' : format[i];
    if (std::string_view("srcdioxXeEfFgG").find(c.type) == std::string_view::npos) {
      return Error("unsupported format character '{}'", format[i]);
    }
    if (next >= values.size()) return Error("not enough arguments for format string");
    auto piece = format_one(c, values[next++]);
    if (!piece) return Error(piece.error());
    out += *piece;
    if (out.size() > limits.max_string_bytes) return Error("string longer than the limit of {} bytes", limits.max_string_bytes);
  }
  if (next < values.size()) return Error("not all arguments converted during string formatting");
  return Value::string(std::move(out));
}

Result<Value> arithmetic(std::string_view op, const Value& a, const Value& b) {
  if (!a.is_number() || !b.is_number()) return type_error(op, a, b);
  const bool as_float = a.is_float() || b.is_float() || op == "/";
  if (as_float) {
    const double x = a.as_float();
    const double y = b.as_float();
    if (op == "+") return Value::floating(x + y);
    if (op == "-") return Value::floating(x - y);
    if (op == "*") return Value::floating(x * y);
    if (op == "**") return Value::floating(std::pow(x, y));
    if (y == 0) return Error("float division by zero");
    if (op == "/") return Value::floating(x / y);
    if (op == "//") return Value::floating(std::floor(x / y));
    double r = std::fmod(x, y);
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return Value::floating(r);
  }
  const int64_t x = a.as_int();
  const int64_t y = b.as_int();
  int64_t r = 0;
  if (op == "+") {
    if (__builtin_add_overflow(x, y, &r)) return Error("integer overflow in '+'");
    return Value::integer(r);
  }
  if (op == "-") {
    if (__builtin_sub_overflow(x, y, &r)) return Error("integer overflow in '-'");
    return Value::integer(r);
  }
  if (op == "*") {
    if (__builtin_mul_overflow(x, y, &r)) return Error("integer overflow in '*'");
    return Value::integer(r);
  }
  if (op == "**") return int_pow(x, y);
  if (y == 0) return Error("integer division or modulo by zero");
  if (x == INT64_MIN && y == -1) return Error("integer overflow in '{}'", op);
  int64_t q = x / y;
  int64_t m = x % y;
  if (m != 0 && ((m < 0) != (y < 0))) {
    --q;
    m += y;
  }
  return Value::integer(op == "//" ? q : m);
}

}  // namespace

Result<Value> binary_op(std::string_view op, const Value& a, const Value& b, const SizeLimits& limits) {
  if (op == "~") {
    std::string s = to_str(a);
    append_str(b, s);
    if (s.size() > limits.max_string_bytes) return Error("string longer than the limit of {} bytes", limits.max_string_bytes);
    return Value::string(std::move(s));
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      if (a.as_string().size() + b.as_string().size() > limits.max_string_bytes) {
        return Error("string longer than the limit of {} bytes", limits.max_string_bytes);
      }
      return Value::string(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list()) {
      if (a.as_list().is_tuple != b.as_list().is_tuple) return type_error(op, a, b);
      if (a.as_list().items.size() + b.as_list().items.size() > limits.max_list_items) {
        return Error("list longer than the limit of {} items", limits.max_list_items);
      }
      std::vector<Value> items = a.as_list().items;
      items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
      return Value::list(std::move(items), a.as_list().is_tuple);
    }
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && b.is_number() && !b.is_float()) return repeat(a, b.as_int(), limits);
    if ((b.is_string() || b.is_list()) && a.is_number() && !a.is_float()) return repeat(b, a.as_int(), limits);
  }
  if (op == "%" && a.is_string()) return percent_format(a.as_string(), b, limits);
  return arithmetic(op, a, b);
}

Result<Value> unary_op(std::string_view op, const Value& v) {
  if (v.is_undefined()) return Error("{}", v.undefined_hint());
  if (!v.is_number()) return Error("bad operand type for unary {}: '{}'", op, v.type_name());
  if (op == "+") return v.is_float() ? v : Value::integer(v.as_int());
  if (v.is_float()) return Value::floating(-v.as_float());
  if (v.as_int() == INT64_MIN) return Error("integer overflow in unary -");
  return Value::integer(-v.as_int());
}

Result<bool> contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case ValueKind::kUndefined: return false;
    case ValueKind::kString:
      if (!item.is_string()) return Error("'in <string>' requires string as left operand, not {}", item.type_name());
      return container.as_string().find(item.as_string()) != std::string::npos;
    case ValueKind::kList:
      for (const Value& v : container.as_list().items) {
        if (v.equals(item)) return true;
      }
      return false;
    case ValueKind::kDict: return item.is_string() && container.as_dict().find(item.as_string()) != nullptr;
    default: return Error("argument of type '{}' is not iterable", container.type_name());
  }
}

Result<Value> get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return Error("{}", obj.undefined_hint());
  const auto missing = [&] {
    return Value::undefined(fmt::format("'{} object' has no attribute '{}'", obj.type_name(), to_str(key)));
  };
  if (obj.is_dict()) {
    if (!key.is_string()) return missing();
    if (const Value* v = obj.as_dict().find(key.as_string())) return *v;
    if (auto method = get_method(obj, key.as_string())) return *method;
    return missing();
  }
  if ((obj.is_list() || obj.is_string()) && key.is_number() && !key.is_float()) {
    const bool is_str = obj.is_string();
    std::vector<size_t> offsets;
    if (is_str) offsets = code_point_offsets(obj.as_string());
    const int64_t len = is_str ? static_cast<int64_t>(offsets.size() - 1) : static_cast<int64_t>(obj.as_list().items.size());
    int64_t i = key.as_int();
    if (i < 0) i += len;
    if (i < 0 || i >= len) return missing();
    if (!is_str) return obj.as_list().items[i];
    return Value::string(obj.as_string().substr(offsets[i], offsets[i + 1] - offsets[i]));
  }
  if (key.is_string()) return get_attr(obj, key.as_string());
  return missing();
}

Result<Value> get_attr(const Value& obj, std::string_view name) {
  if (obj.is_undefined()) return Error("{}", obj.undefined_hint());
  if (auto method = get_method(obj, name)) return *method;
  if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().find(name)) return *v;
  } else if (obj.is_namespace()) {
    if (const Value* v = obj.as_namespace()->find(name)) return *v;
  }
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", obj.type_name(), name));
}

Result<Value> slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) return Error("{}", obj.undefined_hint());
  auto bound = [](const Value& v, std::optional<int64_t>& out) -> Status {
    if (v.is_undefined() || v.is_none()) return Status::ok();
    if (!v.is_number() || v.is_float()) return Status::error("slice indices must be integers or None");
    out = v.as_int();
    return Status::ok();
  };
  std::optional<int64_t> b, e, s;
  SLUICE_RETURN_IF_ERROR(bound(start, b));
  SLUICE_RETURN_IF_ERROR(bound(stop, e));
  SLUICE_RETURN_IF_ERROR(bound(step, s));
  const int64_t st = s.value_or(1);
  if (st == 0) return Error("slice step cannot be zero");
  if (obj.is_string()) {
    const std::string& str = obj.as_string();
    const std::vector<size_t> offsets = code_point_offsets(str);
    std::string out;
    for (size_t i : slice_indices(offsets.size() - 1, b, e, st)) out.append(str, offsets[i], offsets[i + 1] - offsets[i]);
    return Value::string(std::move(out));
  }
  if (obj.is_list()) {
    const auto& items = obj.as_list().items;
    std::vector<Value> out;
    for (size_t i : slice_indices(items.size(), b, e, st)) out.push_back(items[i]);
    return Value::list(std::move(out), obj.as_list().is_tuple);
  }
  return Error("'{}' object is not subscriptable", obj.type_name());
}

Result<std::vector<Value>> iterate(const Value& v, size_t max_items) {
  switch (v.kind()) {
    case ValueKind::kUndefined: return std::vector<Value>{};
    case ValueKind::kList: return v.as_list().items;
    case ValueKind::kDict: {
      std::vector<Value> keys;
      for (const auto& [k, unused] : v.as_dict().entries) keys.push_back(Value::string(k));
      return keys;
    }
    case ValueKind::kString: {
      const std::string& s = v.as_string();
      const std::vector<size_t> offsets = code_point_offsets(s);
      if (offsets.size() - 1 > max_items) return Error("list longer than the limit of {} items", max_items);
      std::vector<Value> chars;
      for (size_t i = 0; i + 1 < offsets.size(); ++i) chars.push_back(Value::string(s.substr(offsets[i], offsets[i + 1] - offsets[i])));
      return chars;
    }
    default: return Error("'{}' object is not iterable", v.type_name());
  }
}

}  // namespace sluice::chat
