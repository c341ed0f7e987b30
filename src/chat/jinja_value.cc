// Value construction, Python comparison/truthiness, str()/repr() and json.dumps.
#include "chat/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "common/utf8.h"

namespace sluice::chat {

Value Value::undefined(std::string hint) {
  Value v;
  v.string_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = ValueKind::kNone;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind_ = ValueKind::kBool;
  v.int_ = b ? 1 : 0;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = ValueKind::kInt;
  v.int_ = i;
  return v;
}
Value Value::floating(double d) {
  Value v;
  v.kind_ = ValueKind::kFloat;
  v.float_ = d;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind_ = ValueKind::kString;
  v.string_ = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value Value::list(std::vector<Value> items, bool is_tuple) {
  int depth = 1;
  for (const Value& item : items) depth = std::max(depth, item.nesting_depth() + 1);
  Value v;
  v.kind_ = ValueKind::kList;
  v.list_ = std::make_shared<const ListObject>(ListObject{std::move(items), is_tuple, depth});
  return v;
}

int Value::nesting_depth() const {
  if (kind_ == ValueKind::kList) return list_->depth;
  if (kind_ == ValueKind::kDict) return dict_->depth;
  return 0;
}
// Dicts with more entries than this get a hash index; a scan is quicker below it.
constexpr size_t kIndexFrom = 8;

Value Value::dict(std::vector<std::pair<std::string, Value>> entries, bool keys_unique) {
  Value v;
  v.kind_ = ValueKind::kDict;
  int depth = 1;
  for (const auto& entry : entries) depth = std::max(depth, entry.second.nesting_depth() + 1);
  auto d = std::make_shared<DictObject>();
  d->depth = depth;
  if (keys_unique) {
    d->entries = std::move(entries);
  } else {
    // Later duplicates replace earlier ones in place, as a Python dict literal does.
    std::unordered_map<std::string, size_t> seen;
    d->entries.reserve(entries.size());
    for (auto& [key, value] : entries) {
      if (auto it = seen.find(key); it != seen.end()) {
        d->entries[it->second].second = std::move(value);
      } else {
        seen.emplace(key, d->entries.size());
        d->entries.emplace_back(std::move(key), std::move(value));
      }
    }
  }
  if (d->entries.size() > kIndexFrom) {
    d->index.reserve(d->entries.size());
    for (size_t i = 0; i < d->entries.size(); ++i) d->index.emplace(d->entries[i].first, i);
  }
  v.dict_ = std::move(d);
  return v;
}
Value Value::ns(NamespacePtr ns) {
  Value v;
  v.kind_ = ValueKind::kNamespace;
  v.ns_ = std::move(ns);
  return v;
}
Value Value::callable(CallablePtr fn) {
  Value v;
  v.kind_ = ValueKind::kCallable;
  v.callable_ = std::move(fn);
  return v;
}

const Value* DictObject::find(std::string_view key) const {
  if (!index.empty()) {
    auto it = index.find(key);
    return it == index.end() ? nullptr : &entries[it->second].second;
  }
  for (const auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

const Value* NamespaceObject::find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

void NamespaceObject::set(std::string key, Value value) {
  for (auto& [k, v] : entries) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

const Value* CallArgs::find_keyword(std::string_view name) const {
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

bool Value::truthy() const {
  switch (kind_) {
    case ValueKind::kUndefined:
    case ValueKind::kNone: return false;
    case ValueKind::kBool:
    case ValueKind::kInt: return int_ != 0;
    case ValueKind::kFloat: return float_ != 0.0;
    case ValueKind::kString: return !string_->empty();
    case ValueKind::kList: return !list_->items.empty();
    case ValueKind::kDict: return !dict_->entries.empty();
    case ValueKind::kNamespace:
    case ValueKind::kCallable: return true;
  }
  return false;
}

bool Value::equals(const Value& other) const {
  if (is_number() && other.is_number()) {
    if (is_float() || other.is_float()) return as_float() == other.as_float();
    return int_ == other.int_;
  }
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case ValueKind::kUndefined:
    case ValueKind::kNone: return true;
    case ValueKind::kString: return *string_ == *other.string_;
    case ValueKind::kList: {
      const auto& a = list_->items;
      const auto& b = other.list_->items;
      if (a.size() != b.size() || list_->is_tuple != other.list_->is_tuple) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        if (!a[i].equals(b[i])) return false;
      }
      return true;
    }
    case ValueKind::kDict: {
      const auto& a = dict_->entries;
      if (a.size() != other.dict_->entries.size()) return false;
      for (const auto& [k, v] : a) {
        const Value* w = other.dict_->find(k);
        if (w == nullptr || !v.equals(*w)) return false;
      }
      return true;
    }
    case ValueKind::kNamespace: return ns_ == other.ns_;
    case ValueKind::kCallable: return callable_ == other.callable_;
    default: return false;
  }
}

std::string_view Value::type_name() const {
  switch (kind_) {
    case ValueKind::kUndefined: return "Undefined";
    case ValueKind::kNone: return "NoneType";
    case ValueKind::kBool: return "bool";
    case ValueKind::kInt: return "int";
    case ValueKind::kFloat: return "float";
    case ValueKind::kString: return "str";
    case ValueKind::kList: return list_->is_tuple ? "tuple" : "list";
    case ValueKind::kDict: return "dict";
    case ValueKind::kNamespace: return "Namespace";
    case ValueKind::kCallable: return "function";
  }
  return "object";
}

Result<int> compare_values(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      const double x = a.as_float();
      const double y = b.as_float();
      return x < y ? -1 : (y < x ? 1 : 0);
    }
    return a.as_int() < b.as_int() ? -1 : (b.as_int() < a.as_int() ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (x[i].equals(y[i])) continue;
      return compare_values(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (y.size() < x.size() ? 1 : 0);
  }
  if (a.is_undefined() || b.is_undefined()) {
    return Error("{}", (a.is_undefined() ? a : b).undefined_hint());
  }
  return Error("'<' not supported between instances of '{}' and '{}'", a.type_name(), b.type_name());
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  // Shortest round-trip digits from to_chars' scientific form "d.ddde+XX", then Python's
  // layout: fixed notation when -4 <= exponent < 16, else "d.ddde+XX" with 2+ exponent digits.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string_view sci(buf, res.ptr - buf);
  std::string out;
  if (sci.front() == '-') {
    out.push_back('-');
    sci.remove_prefix(1);
  }
  const size_t e_pos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e_pos)) {
    if (c != '.') digits.push_back(c);
  }
  int exponent = 0;
  std::from_chars(sci.data() + e_pos + 1 + (sci[e_pos + 1] == '+'), sci.data() + sci.size(), exponent);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int decpt = exponent + 1;  // digits are 0.d1d2... * 10^decpt
  // NOTE: appends only; "lit" + std::string chains trip a GCC 12 -Wrestrict false positive.
  if (exponent < -4 || exponent >= 16) {
    out.push_back(digits[0]);
    if (digits.size() > 1) {
      out.push_back('.');
      out.append(digits, 1, std::string::npos);
    }
    out.append(exponent < 0 ? "e-" : "e+");
    const int mag = std::abs(exponent);
    if (mag < 10) out.push_back('0');
    out.append(std::to_string(mag));
  } else if (decpt <= 0) {
    out.append("0.");
    out.append(static_cast<size_t>(-decpt), '0');
    out.append(digits);
  } else if (static_cast<size_t>(decpt) >= digits.size()) {
    out.append(digits);
    out.append(static_cast<size_t>(decpt) - digits.size(), '0');
    out.append(".0");
  } else {
    out.append(digits, 0, static_cast<size_t>(decpt));
    out.push_back('.');
    out.append(digits, static_cast<size_t>(decpt), std::string::npos);
  }
  return out;
}

namespace {

void append_hex_escape(std::string& out, const char* prefix, uint32_t cp, int width) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += prefix;
  for (int shift = (width - 1) * 4; shift >= 0; shift -= 4) out.push_back(kHex[(cp >> shift) & 0xF]);
}

// Code points Python's str.isprintable() rejects (apart from ASCII controls): the common
// ones, not the whole Unicode table (unassigned code points print raw here).
bool python_unprintable(char32_t cp) {
  return (cp >= 0x80 && cp <= 0xA0) || cp == 0xAD || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) ||
         (cp >= 0x2028 && cp <= 0x202F) || (cp >= 0x205F && cp <= 0x2064) || cp == 0x3000 ||
         cp == 0xFEFF || (cp >= 0xD800 && cp <= 0xF8FF);
}

void append_string_repr(std::string_view s, std::string& out) {
  const bool use_double = s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos;
  const char quote = use_double ? '"' : '\'';
  out.push_back(quote);
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      if (c == quote || c == '\\') {
        out.push_back('\\');
        out.push_back(c);
      } else if (c == '\n') {
        out += "\\n";
      } else if (c == '\r') {
        out += "\\r";
      } else if (c == '\t') {
        out += "\\t";
      } else if (c < 0x20 || c == 0x7F) {
        append_hex_escape(out, "\\x", c, 2);
      } else {
        out.push_back(c);
      }
      ++i;
      continue;
    }
    const Utf8Char ch = utf8_decode(s.substr(i));
    if (ch.status == Utf8Status::kValid && python_unprintable(ch.code_point)) {
      if (ch.code_point <= 0xFF) {
        append_hex_escape(out, "\\x", ch.code_point, 2);
      } else {
        append_hex_escape(out, "\\u", ch.code_point, 4);
      }
    } else {
      out.append(s.substr(i, ch.length));
    }
    i += ch.length;
  }
  out.push_back(quote);
}

}  // namespace

void append_repr(const Value& v, std::string& out) {
  switch (v.kind()) {
    case ValueKind::kString: append_string_repr(v.as_string(), out); return;
    case ValueKind::kList: {
      const auto& list = v.as_list();
      out.push_back(list.is_tuple ? '(' : '[');
      for (size_t i = 0; i < list.items.size(); ++i) {
        if (i > 0) out += ", ";
        append_repr(list.items[i], out);
      }
      if (list.is_tuple && list.items.size() == 1) out.push_back(',');
      out.push_back(list.is_tuple ? ')' : ']');
      return;
    }
    case ValueKind::kDict: {
      out.push_back('{');
      bool first = true;
      for (const auto& [k, val] : v.as_dict().entries) {
        if (!first) out += ", ";
        first = false;
        append_string_repr(k, out);
        out += ": ";
        append_repr(val, out);
      }
      out.push_back('}');
      return;
    }
    default: append_str(v, out); return;
  }
}

void append_str(const Value& v, std::string& out) {
  switch (v.kind()) {
    case ValueKind::kUndefined: return;
    case ValueKind::kNone: out += "None"; return;
    case ValueKind::kBool: out += v.as_bool() ? "True" : "False"; return;
    case ValueKind::kInt: out += std::to_string(v.as_int()); return;
    case ValueKind::kFloat: out += float_repr(v.as_float()); return;
    case ValueKind::kString: out += v.as_string(); return;
    case ValueKind::kList:
    case ValueKind::kDict: append_repr(v, out); return;
    case ValueKind::kNamespace: out += "<Namespace>"; return;
    case ValueKind::kCallable: out += "<function " + v.as_callable().name + ">"; return;
  }
}

std::string to_str(const Value& v) {
  std::string out;
  append_str(v, out);
  return out;
}

}  // namespace sluice::chat
