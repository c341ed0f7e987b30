// Methods of str and dict values (Python's, the subset chat templates call) and the global
// functions: range, namespace, dict, raise_exception, strftime_now.
#include <algorithm>
#include <ctime>

#include "chat/jinja_builtins.h"
#include "chat/jinja_operators.h"
#include "chat/jinja_text.h"

namespace sluice::chat {
namespace {

using MethodFn = Result<Value> (*)(Interpreter&, const Value& self, const CallArgs& args);

Value bind_method(const Value& self, std::string_view name, MethodFn fn) {
  auto callable = std::make_shared<CallableObject>();
  callable->name = std::string(name);
  callable->fn = [self, fn](Interpreter& interp, const CallArgs& args) { return fn(interp, self, args); };
  return Value::callable(std::move(callable));
}

Result<std::string> string_arg(const CallArgs& args, size_t index, std::string_view name) {
  const Value* v = find_arg(args, index, name);
  if (v == nullptr || !v->is_string()) return Error("argument '{}' must be a string", name);
  return v->as_string();
}

std::optional<std::string> optional_string(const CallArgs& args, size_t index, std::string_view name) {
  const Value* v = find_arg(args, index, name);
  if (v == nullptr || !v->is_string()) return std::nullopt;
  return v->as_string();
}

int64_t optional_int(const CallArgs& args, size_t index, std::string_view name, int64_t fallback) {
  const Value* v = find_arg(args, index, name);
  return v != nullptr && v->is_int() ? v->as_int() : fallback;
}

Result<Value> str_strip(const Value& self, const CallArgs& args, bool left, bool right) {
  return Value::string(py_strip(self.as_string(), optional_string(args, 0, "chars"), left, right));
}

Result<Value> str_affix(const Value& self, const CallArgs& args, bool prefix) {
  const Value* arg = find_arg(args, 0, prefix ? "prefix" : "suffix");
  if (arg == nullptr) return Error("{} needs an argument", prefix ? "startswith" : "endswith");
  std::vector<Value> options = arg->is_list() ? arg->as_list().items : std::vector<Value>{*arg};
  for (const Value& o : options) {
    if (!o.is_string()) return Error("{} arg must be str or a tuple of str", prefix ? "startswith" : "endswith");
    if (prefix ? self.as_string().starts_with(o.as_string()) : self.as_string().ends_with(o.as_string())) {
      return Value::boolean(true);
    }
  }
  return Value::boolean(false);
}

Result<Value> str_split(const Value& self, const CallArgs& args) {
  std::optional<std::string> sep = optional_string(args, 0, "sep");
  if (sep && sep->empty()) return Error("empty separator");
  std::vector<Value> out;
  for (std::string& part : py_split(self.as_string(), sep, optional_int(args, 1, "maxsplit", -1))) {
    out.push_back(Value::string(std::move(part)));
  }
  return Value::list(std::move(out));
}

// str.format with "{}", "{0}", "{name}", "{{", "}}" and the !s / !r conversions.
Result<Value> str_format(Interpreter& interp, const Value& self, const CallArgs& args) {
  const std::string& f = self.as_string();
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    const char c = f[i];
    if ((c == '{' || c == '}') && i + 1 < f.size() && f[i + 1] == c) {
      out.push_back(c);
      ++i;
      continue;
    }
    if (c == '}') return Error("Single '}}' encountered in format string");
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    const size_t close = f.find('}', i);
    if (close == std::string::npos) return Error("Single '{{' encountered in format string");
    std::string field = f.substr(i + 1, close - i - 1);
    i = close;
    char conversion = 's';
    if (const size_t bang = field.find('!'); bang != std::string::npos && bang + 2 == field.size()) {
      conversion = field[bang + 1];
      field.resize(bang);
    }
    if (field.find_first_of(":.[") != std::string::npos) return Error("format spec '{}' is not supported", field);
    const Value* v = nullptr;
    if (field.empty() || std::all_of(field.begin(), field.end(), ::isdigit)) {
      const size_t index = field.empty() ? auto_index++ : std::strtoull(field.c_str(), nullptr, 10);
      if (index < args.positional.size()) v = &args.positional[index];
    } else {
      v = args.find_keyword(field);
    }
    if (v == nullptr) return Error("format: no argument for '{{{}}}'", field);
    if (conversion == 'r') {
      append_repr(*v, out);
    } else {
      append_str(*v, out);
    }
    SLUICE_RETURN_IF_ERROR(interp.check_string_size(out.size()));
  }
  return Value::string(std::move(out));
}

Result<Value> str_method(Interpreter& interp, std::string_view name, const Value& self, const CallArgs& args) {
  const std::string& s = self.as_string();
  if (name == "strip") return str_strip(self, args, true, true);
  if (name == "lstrip") return str_strip(self, args, true, false);
  if (name == "rstrip") return str_strip(self, args, false, true);
  if (name == "startswith") return str_affix(self, args, true);
  if (name == "endswith") return str_affix(self, args, false);
  if (name == "split") return str_split(self, args);
  if (name == "upper") return Value::string(py_upper(s));
  if (name == "lower") return Value::string(py_lower(s));
  if (name == "title") return Value::string(py_title(s));
  if (name == "capitalize") return Value::string(py_capitalize(s));
  if (name == "format") return str_format(interp, self, args);
  if (name == "replace") {
    SLUICE_ASSIGN_OR_RETURN(std::string from, string_arg(args, 0, "old"));
    SLUICE_ASSIGN_OR_RETURN(std::string to, string_arg(args, 1, "new"));
    auto out = py_replace(s, from, to, optional_int(args, 2, "count", -1), interp.options().limits.max_output_bytes);
    if (!out) return Error("string longer than the limit of {} bytes", interp.options().limits.max_output_bytes);
    return Value::string(std::move(*out));
  }
  if (name == "join") {
    const Value* items = find_arg(args, 0, "iterable");
    if (items == nullptr) return Error("join needs an argument");
    SLUICE_ASSIGN_OR_RETURN(std::vector<Value> parts, iterate(*items, interp.options().limits.max_list_items));
    std::string out;
    for (size_t i = 0; i < parts.size(); ++i) {
      if (!parts[i].is_string()) return Error("sequence item {}: expected str instance, {} found", i, parts[i].type_name());
      if (i > 0) out += s;
      out += parts[i].as_string();
      SLUICE_RETURN_IF_ERROR(interp.check_string_size(out.size()));
    }
    return Value::string(std::move(out));
  }
  if (name == "find" || name == "rfind" || name == "count") {
    SLUICE_ASSIGN_OR_RETURN(std::string sub, string_arg(args, 0, "sub"));
    if (name == "count") {
      if (sub.empty()) return Value::integer(static_cast<int64_t>(code_point_length(s)) + 1);
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value::integer(n);
    }
    const size_t hit = name == "find" ? s.find(sub) : s.rfind(sub);
    if (hit == std::string::npos) return Value::integer(-1);
    return Value::integer(static_cast<int64_t>(code_point_length(std::string_view(s).substr(0, hit))));
  }
  if (name == "splitlines") {
    std::vector<Value> out;
    for (std::string& line : py_splitlines(s)) out.push_back(Value::string(std::move(line)));
    return Value::list(std::move(out));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    SLUICE_ASSIGN_OR_RETURN(std::string affix, string_arg(args, 0, name == "removeprefix" ? "prefix" : "suffix"));
    if (name == "removeprefix" && s.starts_with(affix)) return Value::string(s.substr(affix.size()));
    if (name == "removesuffix" && s.ends_with(affix)) return Value::string(s.substr(0, s.size() - affix.size()));
    return self;
  }
  // is* predicates (ASCII classes; non-ASCII letters count as alphabetic).
  auto all_of = [&](auto pred) {
    return Value::boolean(!s.empty() && std::all_of(s.begin(), s.end(), [&](char c) {
      return static_cast<unsigned char>(c) >= 0x80 ? name != "isdigit" && name != "isspace" : pred(static_cast<unsigned char>(c));
    }));
  };
  if (name == "isdigit") return all_of(::isdigit);
  if (name == "isalpha") return all_of(::isalpha);
  if (name == "isalnum") return all_of(::isalnum);
  if (name == "isspace") return all_of(::isspace);
  if (name == "islower") return Value::boolean(py_lower(s) == s && py_upper(s) != s);
  if (name == "isupper") return Value::boolean(py_upper(s) == s && py_lower(s) != s);
  return Error("str has no method '{}'", name);
}

constexpr std::string_view kStrMethods[] = {
    "strip", "lstrip", "rstrip", "startswith", "endswith", "split", "upper", "lower", "title", "capitalize",
    "format", "replace", "join", "find", "rfind", "count", "splitlines", "removeprefix", "removesuffix",
    "isdigit", "isalpha", "isalnum", "isspace", "islower", "isupper"};

Result<Value> dict_method(std::string_view name, const Value& self, const CallArgs& args) {
  const auto& entries = self.as_dict().entries;
  if (name == "get") {
    const Value* key = find_arg(args, 0, "key");
    if (key == nullptr) return Error("get expected at least 1 argument, got 0");
    const Value* found = key->is_string() ? self.as_dict().find(key->as_string()) : nullptr;
    if (found != nullptr) return *found;
    const Value* fallback = find_arg(args, 1, "default");
    return fallback != nullptr ? *fallback : Value::none();
  }
  std::vector<Value> out;
  for (const auto& [k, v] : entries) {
    if (name == "keys") {
      out.push_back(Value::string(k));
    } else if (name == "values") {
      out.push_back(v);
    } else {
      out.push_back(Value::list({Value::string(k), v}, /*is_tuple=*/true));
    }
  }
  return Value::list(std::move(out));
}

}  // namespace

const Value* find_arg(const CallArgs& args, size_t index, std::string_view name) {
  if (index < args.positional.size()) return &args.positional[index];
  return args.find_keyword(name);
}

std::optional<Value> get_method(const Value& receiver, std::string_view name) {
  if (receiver.is_string()) {
    for (std::string_view m : kStrMethods) {
      if (m != name) continue;
      // `m` views a literal with static storage, so the bound method may keep it.
      auto callable = std::make_shared<CallableObject>();
      callable->name = std::string(m);
      callable->fn = [receiver, m](Interpreter& interp, const CallArgs& args) { return str_method(interp, m, receiver, args); };
      return Value::callable(std::move(callable));
    }
  }
  if (receiver.is_dict() && (name == "items" || name == "keys" || name == "values" || name == "get")) {
    if (name == "items") return bind_method(receiver, name, [](Interpreter&, const Value& s, const CallArgs& a) { return dict_method("items", s, a); });
    if (name == "keys") return bind_method(receiver, name, [](Interpreter&, const Value& s, const CallArgs& a) { return dict_method("keys", s, a); });
    if (name == "values") return bind_method(receiver, name, [](Interpreter&, const Value& s, const CallArgs& a) { return dict_method("values", s, a); });
    return bind_method(receiver, name, [](Interpreter&, const Value& s, const CallArgs& a) { return dict_method("get", s, a); });
  }
  return std::nullopt;
}

namespace {

Result<Value> global_range(Interpreter& interp, const CallArgs& args) {
  std::vector<int64_t> n;
  for (const Value& v : args.positional) {
    if (!v.is_number() || v.is_float()) return Error("range() arguments must be integers, not {}", v.type_name());
    n.push_back(v.as_int());
  }
  if (n.empty() || n.size() > 3) return Error("range expected 1 to 3 arguments, got {}", n.size());
  const int64_t start = n.size() == 1 ? 0 : n[0];
  const int64_t stop = n.size() == 1 ? n[0] : n[1];
  const int64_t step = n.size() == 3 ? n[2] : 1;
  if (step == 0) return Error("range() arg 3 must not be zero");
  const double count = std::max(0.0, std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step)));
  SLUICE_RETURN_IF_ERROR(interp.check_list_size(static_cast<size_t>(std::min(count, 1e18))));
  std::vector<Value> out;
  for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) out.push_back(Value::integer(start + i * step));
  return Value::list(std::move(out));
}

Result<Value> global_namespace(Interpreter& interp, const CallArgs& args, bool as_dict) {
  std::vector<std::pair<std::string, Value>> entries;
  if (args.positional.size() > 1) return Error("expected at most 1 positional argument");
  if (args.positional.size() == 1) {
    if (!args.positional[0].is_dict()) return Error("cannot convert {} to a mapping", args.positional[0].type_name());
    entries = args.positional[0].as_dict().entries;
  }
  for (const auto& kw : args.keyword) entries.push_back(kw);
  if (as_dict) return Value::dict(std::move(entries));
  NamespacePtr ns = interp.new_namespace();
  for (auto& [k, v] : entries) ns->set(std::move(k), std::move(v));
  return Value::ns(std::move(ns));
}

Value make_global(std::string name, std::function<Result<Value>(Interpreter&, const CallArgs&)> fn) {
  auto callable = std::make_shared<CallableObject>();
  callable->name = std::move(name);
  callable->fn = std::move(fn);
  return Value::callable(std::move(callable));
}

}  // namespace

std::optional<Value> get_global(std::string_view name, const RenderOptions& options) {
  if (name == "range") return make_global("range", global_range);
  if (name == "namespace") {
    return make_global("namespace", [](Interpreter& i, const CallArgs& a) { return global_namespace(i, a, false); });
  }
  if (name == "dict") {
    return make_global("dict", [](Interpreter& i, const CallArgs& a) { return global_namespace(i, a, true); });
  }
  if (name == "raise_exception") {
    return make_global("raise_exception", [](Interpreter&, const CallArgs& a) -> Result<Value> {
      const Value* message = find_arg(a, 0, "message");
      return std::unexpected(Status::error(message != nullptr ? to_str(*message) : "", StatusCode::kInvalid));
    });
  }
  if (name == "strftime_now" && options.now) {
    const std::time_t t = std::chrono::system_clock::to_time_t(*options.now);
    return make_global("strftime_now", [t](Interpreter&, const CallArgs& a) -> Result<Value> {
      const Value* format = find_arg(a, 0, "format");
      if (format == nullptr || !format->is_string()) return Error("strftime_now needs a format string");
      if (format->as_string().size() > 256) return Error("strftime_now: format too long");
      std::tm tm{};
      gmtime_r(&t, &tm);
      char buf[2048];
      const size_t n = std::strftime(buf, sizeof(buf), format->as_string().c_str(), &tm);
      return Value::string(std::string(buf, n));
    });
  }
  return std::nullopt;
}

}  // namespace sluice::chat
