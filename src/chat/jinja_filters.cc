// Jinja filters (`x | name(args)`), each as jinja2 3.1 defines it, except tojson, which is
// transformers' override: json.dumps(x, ensure_ascii=False, indent=None, separators=None,
// sort_keys=False) -- no HTML escaping, ", " and ": " separators (",", ": " with indent).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>

#include "chat/jinja_builtins.h"
#include "chat/jinja_operators.h"
#include "chat/jinja_text.h"

namespace sluice::chat {
namespace {

constexpr std::array<std::string_view, 46> kFilters = {
    "trim",       "length",     "count",  "upper",  "lower",   "title",   "capitalize", "tojson", "default",  "d",
    "join",       "replace",    "string", "int",    "float",   "list",    "first",      "last",   "reverse",  "items",
    "selectattr", "rejectattr", "select", "reject", "map",     "safe",    "unique",     "sort",   "dictsort", "max",
    "min",        "sum",        "abs",    "round",  "indent",  "escape",  "e",          "attr",   "format",   "center",
    "wordcount",  "batch",      "slice",  "bool",   "xmlattr", "truncate"};

Value arg_or(const CallArgs& args, size_t index, std::string_view name, const Value& fallback) {
  const Value* v = find_arg(args, index, name);
  return v != nullptr ? *v : fallback;
}

Result<int64_t> int_arg(const CallArgs& args, size_t index, std::string_view name, int64_t fallback) {
  const Value* v = find_arg(args, index, name);
  if (v == nullptr || v->is_none()) return fallback;
  if (!v->is_number() || v->is_float()) return Error("argument '{}' must be an integer", name);
  return v->as_int();
}

// jinja2's batch(linecount, fill_with): rows of `linecount` items, the last filled up to it; and
// slice(slices, fill_with): `slices` columns, the first len % slices of them one item longer,
// the others filled with one.
Result<Value> batch_or_slice(std::vector<Value>& items, const CallArgs& args, bool batch, size_t max_items) {
  const char* name = batch ? "batch" : "slice";
  SLUICE_ASSIGN_OR_RETURN(int64_t n, int_arg(args, 0, batch ? "linecount" : "slices", 0));
  if (n <= 0) return Error("{}: the count must be > 0, got {}", name, n);
  const Value* fill = find_arg(args, 1, "fill_with");
  const bool filled = fill != nullptr && !fill->is_none();
  if ((filled || !batch) && static_cast<uint64_t>(n) > max_items) {
    return Error("list longer than the limit of {} items", max_items);
  }
  const size_t count = static_cast<size_t>(n), size = items.size();
  std::vector<Value> out;
  if (batch) {
    for (size_t at = 0; at < size; at += count) {
      std::vector<Value> row(items.begin() + at, items.begin() + std::min(size, at + count));
      if (filled) row.resize(count, *fill);
      out.push_back(Value::list(std::move(row)));
    }
    return Value::list(std::move(out));
  }
  const size_t per = size / count, extra = size % count;
  for (size_t k = 0, offset = 0; k < count; ++k) {
    const size_t start = offset + k * per;
    if (k < extra) ++offset;
    std::vector<Value> row(items.begin() + start, items.begin() + offset + (k + 1) * per);
    if (filled && k >= extra) row.push_back(*fill);
    out.push_back(Value::list(std::move(row)));
  }
  return Value::list(std::move(out));
}

// jinja2's truncate(length=255, killwords=False, end='...', leeway=5): text longer than length +
// leeway code points cut to length, `end` included, at the last space unless killwords.
Result<Value> truncate(const Value& v, const CallArgs& args) {
  SLUICE_ASSIGN_OR_RETURN(int64_t length, int_arg(args, 0, "length", 255));
  const bool killwords = arg_or(args, 1, "killwords", Value::boolean(false)).truthy();
  const std::string end = to_str(arg_or(args, 2, "end", Value::string("...")));
  SLUICE_ASSIGN_OR_RETURN(int64_t leeway, int_arg(args, 3, "leeway", 5));
  const auto end_length = static_cast<int64_t>(code_point_length(end));
  if (length < end_length) return Error("truncate: expected length >= {}, got {}", end_length, length);
  if (leeway < 0) return Error("truncate: expected leeway >= 0, got {}", leeway);
  std::string s = to_str(v);
  const std::vector<size_t> offsets = code_point_offsets(s);
  const auto s_length = static_cast<int64_t>(offsets.size()) - 1;
  if (s_length <= length || s_length - length <= leeway) return Value::string(std::move(s));  // (no sum to overflow)
  s.resize(offsets[static_cast<size_t>(length - end_length)]);
  if (const size_t space = s.rfind(' '); !killwords && space != std::string::npos) s.resize(space);
  return Value::string(s + end);
}

// Dotted attribute path ("a.b" or "0"), as jinja2's make_attrgetter resolves it.
Result<Value> get_path(const Value& item, const Value& path) {
  if (path.is_number() && !path.is_float()) return get_item(item, path);
  Value current = item;
  for (const std::string& part : py_split(to_str(path), std::string("."), -1)) {
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit) && part.size() < 18;
    SLUICE_ASSIGN_OR_RETURN(current, numeric ? get_item(current, Value::integer(std::atoll(part.c_str())))
                                             : get_item(current, Value::string(part)));
  }
  return current;
}

Result<Value> length(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kUndefined: return Value::integer(0);
    case ValueKind::kString: return Value::integer(static_cast<int64_t>(code_point_length(v.as_string())));
    case ValueKind::kList: return Value::integer(static_cast<int64_t>(v.as_list().items.size()));
    case ValueKind::kDict: return Value::integer(static_cast<int64_t>(v.as_dict().entries.size()));
    default: return Error("object of type '{}' has no len()", v.type_name());
  }
}

Result<Value> tojson(Interpreter& interp, const Value& v, const CallArgs& args) {
  JsonDumpOptions o;
  o.max_bytes = interp.options().limits.max_output_bytes;
  SLUICE_ASSIGN_OR_RETURN(int64_t indent, int_arg(args, 1, "indent", -1));
  if (indent > 1024) return Error("tojson: indent {} is too large", indent);
  o.indent = static_cast<int>(indent);
  if (o.indent >= 0) o.item_separator = ",";
  if (const Value* seps = find_arg(args, 2, "separators"); seps != nullptr && !seps->is_none()) {
    if (!seps->is_list() || seps->as_list().items.size() != 2 || !seps->as_list().items[0].is_string() ||
        !seps->as_list().items[1].is_string()) {
      return Error("tojson: separators must be a pair of strings");
    }
    o.item_separator = seps->as_list().items[0].as_string();
    o.key_separator = seps->as_list().items[1].as_string();
  }
  o.sort_keys = arg_or(args, 3, "sort_keys", Value::boolean(false)).truthy();
  o.ensure_ascii = find_arg(args, 0, "ensure_ascii") != nullptr && find_arg(args, 0, "ensure_ascii")->truthy();
  SLUICE_ASSIGN_OR_RETURN(std::string json, to_json(v, o, interp.options().limits.max_json_depth));
  return Value::string(std::move(json));
}

// Python's int(s, base) on a stripped string: a sign, the base's prefix (0x, 0o, 0b; any with
// base 0), digits with single underscores between them. nullopt if it is not one, or past int64.
std::optional<int64_t> parse_py_int(std::string_view s, int64_t base) {
  bool negative = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) negative = s[0] == '-', s.remove_prefix(1);
  auto prefix_base = [](std::string_view t) -> int64_t {
    if (t.size() < 2 || t[0] != '0') return 0;
    const char p = static_cast<char>(std::tolower(static_cast<unsigned char>(t[1])));
    return p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
  };
  bool after_prefix = false;
  if (const int64_t p = prefix_base(s); p != 0 && (base == 0 || base == p)) {
    base = p;
    s.remove_prefix(2);
    after_prefix = true;  // int('0x_1a', 16) is allowed
  } else if (base == 0) {
    base = 10;
    if (s.size() > 1 && s[0] == '0' && s.find_first_not_of("0_") != std::string_view::npos) return std::nullopt;
  }
  if (base < 2 || base > 36 || s.empty()) return std::nullopt;
  unsigned __int128 value = 0;
  bool last_digit = after_prefix;  // an underscore needs a digit (or the prefix) before it
  size_t digits = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = static_cast<char>(std::tolower(static_cast<unsigned char>(s[i])));
    if (c == '_') {
      if (!last_digit || i + 1 == s.size()) return std::nullopt;
      last_digit = false;
      continue;
    }
    const int64_t d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'z' ? c - 'a' + 10 : 99;
    if (d >= base) return std::nullopt;
    value = value * static_cast<unsigned>(base) + static_cast<unsigned>(d);
    if (value > static_cast<unsigned __int128>(INT64_MAX) + 1) return std::nullopt;
    last_digit = true;
    ++digits;
  }
  if (digits == 0) return std::nullopt;
  if (!negative && value > static_cast<unsigned __int128>(INT64_MAX)) return std::nullopt;
  return negative ? static_cast<int64_t>(-static_cast<__int128>(value)) : static_cast<int64_t>(value);
}

// Python's float() of stripped text: decimal digits, a point, an exponent, inf and nan, with
// single underscores between digits ("1_0.5" is 10.5); never hex (strtod would take 0x1A).
std::optional<double> py_float(std::string_view s) {
  if (s.empty() || s.find_first_of("xXpP") != std::string_view::npos) return std::nullopt;
  std::string text;
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '_') {
      text += s[i];
    } else if (i == 0 || i + 1 == s.size() || !digit(s[i - 1]) || !digit(s[i + 1])) {
      return std::nullopt;
    }
  }
  char* end = nullptr;
  const double d = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) return std::nullopt;
  return d;
}

// Jinja2's |int(default=0, base=10): int(value, base) for a string, else int(value); failing
// that int(float(value)) ("42.23"|int is 42); failing that the default.
Result<Value> to_int(const Value& v, const CallArgs& args) {
  const Value fallback = arg_or(args, 0, "default", Value::integer(0));
  SLUICE_ASSIGN_OR_RETURN(int64_t base, int_arg(args, 1, "base", 10));
  if (v.is_number()) {
    if (!v.is_float()) return Value::integer(v.as_int());
    const double d = v.as_float();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return fallback;
    return Value::integer(static_cast<int64_t>(d));
  }
  if (!v.is_string()) return fallback;
  const std::string s = py_strip(v.as_string(), std::nullopt, true, true);
  if (auto i = parse_py_int(s, base)) return Value::integer(*i);
  const std::optional<double> d = py_float(s);
  if (d && std::isfinite(*d) && std::fabs(*d) < 9.2e18) return Value::integer(static_cast<int64_t>(*d));
  return fallback;
}

Result<Value> to_float(const Value& v, const CallArgs& args) {
  const Value fallback = arg_or(args, 0, "default", Value::floating(0.0));
  if (v.is_number()) return Value::floating(v.as_float());
  if (!v.is_string()) return fallback;
  const std::optional<double> d = py_float(py_strip(v.as_string(), std::nullopt, true, true));
  return d ? Value::floating(*d) : fallback;
}

// select / reject / selectattr / rejectattr.
Result<Value> select(Interpreter& interp, const Value& v, const CallArgs& args, bool by_attr, bool keep) {
  SLUICE_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v, interp.options().limits.max_list_items));
  size_t next_arg = 0;
  Value attr;
  if (by_attr) {
    if (args.positional.empty()) return Error("missing attribute argument");
    attr = args.positional[next_arg++];
  }
  std::string test;
  CallArgs test_args;
  if (next_arg < args.positional.size()) {
    if (!args.positional[next_arg].is_string()) return Error("test name must be a string");
    test = args.positional[next_arg++].as_string();
    if (!is_known_test(test)) return Error("no test named '{}'", test);
    test_args.positional.assign(args.positional.begin() + next_arg, args.positional.end());
  }
  std::vector<Value> out;
  for (const Value& item : items) {
    Value subject = item;
    if (by_attr) {
      SLUICE_ASSIGN_OR_RETURN(subject, get_path(item, attr));
    }
    bool passed = subject.truthy();
    if (!test.empty()) {
      SLUICE_ASSIGN_OR_RETURN(passed, apply_test(interp, test, subject, test_args));
    }
    if (passed == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Result<Value> map(Interpreter& interp, const Value& v, const CallArgs& args) {
  SLUICE_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v, interp.options().limits.max_list_items));
  std::vector<Value> out;
  if (const Value* attr = args.find_keyword("attribute")) {
    const Value* fallback = args.find_keyword("default");
    for (const Value& item : items) {
      SLUICE_ASSIGN_OR_RETURN(Value got, get_path(item, *attr));
      out.push_back(got.is_undefined() && fallback != nullptr ? *fallback : got);
    }
    return Value::list(std::move(out));
  }
  if (args.positional.empty() || !args.positional[0].is_string()) return Error("map needs a filter name or attribute=");
  const std::string& filter = args.positional[0].as_string();
  if (!is_known_filter(filter)) return Error("no filter named '{}'", filter);
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : items) {
    SLUICE_ASSIGN_OR_RETURN(Value mapped, apply_filter(interp, filter, item, rest));
    out.push_back(std::move(mapped));
  }
  return Value::list(std::move(out));
}

// Sort key comparison shared by sort/max/min: case-insensitive strings unless asked.
Result<int> compare_keys(const Value& a, const Value& b, bool case_sensitive) {
  if (!case_sensitive && a.is_string() && b.is_string()) {
    return compare_values(Value::string(py_lower(a.as_string())), Value::string(py_lower(b.as_string())));
  }
  return compare_values(a, b);
}

Result<Value> sort(Interpreter& interp, const Value& v, const CallArgs& args) {
  SLUICE_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v, interp.options().limits.max_list_items));
  const bool reverse = arg_or(args, 0, "reverse", Value::boolean(false)).truthy();
  const bool case_sensitive = arg_or(args, 1, "case_sensitive", Value::boolean(false)).truthy();
  const Value* attr = find_arg(args, 2, "attribute");
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items) {
    Value key = item;
    if (attr != nullptr && !attr->is_none()) {
      SLUICE_ASSIGN_OR_RETURN(key, get_path(item, *attr));
    }
    keyed.emplace_back(std::move(key), std::move(item));
  }
  Status failure;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    auto c = compare_keys(a.first, b.first, case_sensitive);
    if (!c) {
      failure = c.error();
      return false;
    }
    return reverse ? *c > 0 : *c < 0;
  });
  if (!failure.is_ok()) return std::unexpected(failure);
  std::vector<Value> out;
  for (auto& [key, item] : keyed) out.push_back(std::move(item));
  return Value::list(std::move(out));
}

Result<Value> extreme(Interpreter& interp, const Value& v, const CallArgs& args, bool want_max) {
  SLUICE_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v, interp.options().limits.max_list_items));
  const bool case_sensitive = arg_or(args, 0, "case_sensitive", Value::boolean(false)).truthy();
  const Value* attr = find_arg(args, 1, "attribute");
  Value best;
  Value best_key;
  for (const Value& item : items) {
    Value key = item;
    if (attr != nullptr && !attr->is_none()) {
      SLUICE_ASSIGN_OR_RETURN(key, get_path(item, *attr));
    }
    if (!best_key.is_undefined() || !best.is_undefined()) {
      SLUICE_ASSIGN_OR_RETURN(int c, compare_keys(key, best_key, case_sensitive));
      if (want_max ? c <= 0 : c >= 0) continue;
    }
    best = item;
    best_key = key;
  }
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  return best;
}

Result<Value> join(Interpreter& interp, const Value& v, const CallArgs& args) {
  SLUICE_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v, interp.options().limits.max_list_items));
  const std::string sep = to_str(arg_or(args, 0, "d", Value::string("")));
  const Value* attr = find_arg(args, 1, "attribute");
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += sep;
    Value item = items[i];
    if (attr != nullptr && !attr->is_none()) {
      SLUICE_ASSIGN_OR_RETURN(item, get_path(item, *attr));
    }
    append_str(item, out);
    SLUICE_RETURN_IF_ERROR(interp.check_string_size(out.size()));
  }
  return Value::string(std::move(out));
}

Result<Value> indent(const Value& v, const CallArgs& args, size_t max_bytes) {
  const Value width = arg_or(args, 0, "width", Value::integer(4));
  std::string pad;
  if (width.is_string()) {
    pad = width.as_string();
  } else if (width.is_number() && !width.is_float() && width.as_int() >= 0 && width.as_int() <= 1024) {
    pad.assign(static_cast<size_t>(width.as_int()), ' ');
  } else {
    return Error("indent: bad width");
  }
  const bool first = arg_or(args, 1, "first", Value::boolean(false)).truthy();
  const bool blank = arg_or(args, 2, "blank", Value::boolean(false)).truthy();
  // Jinja2's do_indent: (s + "\n").splitlines(), joined again with "\n" (so "\r\n" becomes "\n").
  const std::vector<std::string> lines = py_splitlines(to_str(v) + "\n");
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      out += "\n";
      if (blank || !lines[i].empty()) out += pad;
    }
    out += lines[i];
    if (out.size() > max_bytes) return Error("string longer than the limit of {} bytes", max_bytes);
  }
  if (first) out = pad + out;
  return Value::string(std::move(out));
}

std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

}  // namespace

bool is_known_filter(std::string_view name) {
  return std::find(kFilters.begin(), kFilters.end(), name) != kFilters.end();
}

Result<Value> apply_filter(Interpreter& interp, std::string_view name, const Value& v, const CallArgs& args) {
  const size_t max_bytes = interp.options().limits.max_output_bytes;
  const size_t max_items = interp.options().limits.max_list_items;
  if (name == "default" || name == "d") {
    const bool boolean = arg_or(args, 1, "boolean", Value::boolean(false)).truthy();
    if (v.is_undefined() || (boolean && !v.truthy())) return arg_or(args, 0, "default_value", Value::string(""));
    return v;
  }
  if (name == "length" || name == "count") return length(v);
  if (name == "tojson") return tojson(interp, v, args);
  if (name == "safe" || name == "string") return Value::string(to_str(v));
  if (name == "escape" || name == "e") return Value::string(html_escape(to_str(v)));
  if (name == "join") return join(interp, v, args);
  if (name == "map") return map(interp, v, args);
  if (name == "select" || name == "reject") return select(interp, v, args, false, name == "select");
  if (name == "selectattr" || name == "rejectattr") return select(interp, v, args, true, name == "selectattr");
  if (name == "sort") return sort(interp, v, args);
  if (name == "max" || name == "min") return extreme(interp, v, args, name == "max");
  if (name == "int") return to_int(v, args);
  if (name == "float") return to_float(v, args);
  if (name == "bool") return Value::boolean(v.truthy());
  if (name == "indent") return indent(v, args, max_bytes);
  if (name == "attr") return get_attr(v, to_str(arg_or(args, 0, "name", Value::string(""))));
  if (name == "format") {
    if (!v.is_string()) return Error("format: the format must be a string");
    return binary_op("%", v, Value::list(args.positional, /*is_tuple=*/true), SizeLimits{max_bytes, max_items});
  }
  if (name == "trim") {
    const Value* chars = find_arg(args, 0, "chars");
    std::optional<std::string> set;
    if (chars != nullptr && !chars->is_none()) set = to_str(*chars);
    return Value::string(py_strip(to_str(v), set, true, true));
  }
  if (name == "upper") return Value::string(py_upper(to_str(v)));
  if (name == "lower") return Value::string(py_lower(to_str(v)));
  if (name == "title") return Value::string(jinja_title(to_str(v)));
  if (name == "capitalize") return Value::string(py_capitalize(to_str(v)));
  if (name == "wordcount") return Value::integer(static_cast<int64_t>(py_split(to_str(v), std::nullopt, -1).size()));
  if (name == "replace") {
    const Value* from = find_arg(args, 0, "old");
    const Value* to = find_arg(args, 1, "new");
    if (from == nullptr || to == nullptr) return Error("replace needs two arguments");
    SLUICE_ASSIGN_OR_RETURN(int64_t count, int_arg(args, 2, "count", -1));
    auto out = py_replace(to_str(v), to_str(*from), to_str(*to), count, max_bytes);
    if (!out) return Error("string longer than the limit of {} bytes", max_bytes);
    return Value::string(std::move(*out));
  }
  if (name == "abs") {
    if (v.is_float()) return Value::floating(std::fabs(v.as_float()));
    if (!v.is_number()) return Error("bad operand type for abs(): '{}'", v.type_name());
    return unary_op(v.as_int() < 0 ? "-" : "+", v);
  }
  if (name == "round") {
    if (!v.is_number()) return Error("round needs a number, not {}", v.type_name());
    SLUICE_ASSIGN_OR_RETURN(int64_t precision, int_arg(args, 0, "precision", 0));
    const std::string method = to_str(arg_or(args, 1, "method", Value::string("common")));
    const double scale = std::pow(10.0, static_cast<double>(std::clamp<int64_t>(precision, -300, 300)));
    if (method == "common" && !v.is_float()) {
      // Python's round(int, n): an int; n < 0 rounds half to even at 10^-n.
      const int64_t x = v.as_int();
      if (precision >= 0) return Value::integer(x);
      if (precision < -18) return Value::integer(0);
      int64_t unit = 1;
      for (int64_t k = 0; k < -precision; ++k) unit *= 10;
      const __int128 q = x / unit, r = x % unit;
      __int128 down = q * unit;
      if (r < 0) down -= unit;  // floor
      const __int128 rem = static_cast<__int128>(x) - down;
      __int128 out = down;
      if (2 * rem > unit || (2 * rem == unit && ((down / unit) % 2 != 0))) out += unit;
      if (out > INT64_MAX || out < INT64_MIN) return Error("round: result out of range");
      return Value::integer(static_cast<int64_t>(out));
    }
    const double x = v.as_float();
    if (method == "ceil") return Value::floating(std::ceil(x * scale) / scale);
    if (method == "floor") return Value::floating(std::floor(x * scale) / scale);
    if (method != "common") return Error("round: method must be common, ceil or floor");
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(std::clamp<int64_t>(precision, 0, 300)), x);
    return Value::floating(precision <= 0 ? std::nearbyint(x * scale) / scale : std::strtod(buf, nullptr));
  }
  if (name == "sum") {
    const Value* attr = find_arg(args, 0, "attribute");
    Value total = arg_or(args, 1, "start", Value::integer(0));
    SLUICE_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v, max_items));
    for (const Value& item : items) {
      Value term = item;
      if (attr != nullptr && !attr->is_none()) {
        SLUICE_ASSIGN_OR_RETURN(term, get_path(item, *attr));
      }
      SLUICE_ASSIGN_OR_RETURN(total, binary_op("+", total, term, SizeLimits{max_bytes, max_items}));
    }
    return total;
  }
  if (name == "center") {
    SLUICE_ASSIGN_OR_RETURN(int64_t width, int_arg(args, 0, "width", 80));
    std::string s = to_str(v);
    const int64_t len = static_cast<int64_t>(code_point_length(s));
    if (width > static_cast<int64_t>(max_bytes)) return Error("center: width too large");
    if (width <= len) return Value::string(std::move(s));
    const int64_t pad = width - len;
    const int64_t left = pad / 2 + (pad & width & 1);  // Python's str.center rounding
    return Value::string(std::string(left, ' ') + s + std::string(pad - left, ' '));
  }
  if (name == "truncate") return truncate(v, args);
  if (name == "xmlattr") return Error("filter '{}' is not supported", name);
  // Filters over the items of a sequence.
  if (v.is_string() && (name == "first" || name == "last" || name == "reverse")) {
    const std::vector<size_t> offsets = code_point_offsets(v.as_string());
    const size_t n = offsets.size() - 1;
    if (name == "reverse") {
      std::string out;
      for (size_t i = n; i-- > 0;) out.append(v.as_string(), offsets[i], offsets[i + 1] - offsets[i]);
      return Value::string(std::move(out));
    }
    if (n == 0) return Value::undefined("No first item, sequence was empty.");
    const size_t i = name == "first" ? 0 : n - 1;
    return Value::string(v.as_string().substr(offsets[i], offsets[i + 1] - offsets[i]));
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::list({});
    if (!v.is_dict()) return Error("items: expected a mapping, not {}", v.type_name());
    std::vector<Value> out;
    for (const auto& [k, val] : v.as_dict().entries) out.push_back(Value::list({Value::string(k), val}, true));
    return Value::list(std::move(out));
  }
  if (name == "dictsort") {
    if (!v.is_dict()) return Error("dictsort: expected a mapping, not {}", v.type_name());
    std::vector<Value> pairs;
    for (const auto& [k, val] : v.as_dict().entries) pairs.push_back(Value::list({Value::string(k), val}, true));
    CallArgs sort_args;
    sort_args.keyword.emplace_back("attribute", Value::integer(0));
    sort_args.keyword.emplace_back("case_sensitive", arg_or(args, 0, "case_sensitive", Value::boolean(false)));
    sort_args.keyword.emplace_back("reverse", arg_or(args, 2, "reverse", Value::boolean(false)));
    return sort(interp, Value::list(std::move(pairs)), sort_args);
  }
  SLUICE_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v, max_items));
  if (name == "list") return Value::list(std::move(items));
  if (name == "batch" || name == "slice") return batch_or_slice(items, args, name == "batch", max_items);
  if (name == "first") return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
  if (name == "last") return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
  if (name == "reverse") {
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (name == "unique") {
    std::vector<Value> out;
    for (Value& item : items) {
      SLUICE_RETURN_IF_ERROR(interp.charge_work(out.size() + 1));
      const bool seen = std::any_of(out.begin(), out.end(), [&](const Value& o) {
        return o.is_string() && item.is_string() ? py_lower(o.as_string()) == py_lower(item.as_string()) : o.equals(item);
      });
      if (!seen) out.push_back(std::move(item));
    }
    return Value::list(std::move(out));
  }
  return Error("no filter named '{}'", name);
}

}  // namespace sluice::chat
