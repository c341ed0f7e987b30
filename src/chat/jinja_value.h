// Value: the dynamic value a Jinja template computes with, modelled on the Python objects
// jinja2 sees when transformers renders a chat template.
//
// Kinds: undefined, none, bool, int (int64; overflow is an error, not a bigint), float,
// string (UTF-8; length, indexing and slicing count code points as Python does), list
// (tuple is a list that prints as "(a, b)"), dict (string keys, insertion order kept, as
// Python dicts keep it), namespace (the one mutable object: `set ns.x = ...`) and
// callable (a builtin function or method bound to its receiver, or a macro).
//
// Invariants: lists and dicts are immutable once built and shared by pointer, so copying a
// Value is cheap for them and nothing a template does can change a value another part of
// it holds (the ImmutableSandboxedEnvironment transformers uses gives the same guarantee).
// A namespace is shared: every copy sees an attribute set through any of them.
//
// Printing follows Python: str() for output ("True", "None", "1.0", "[1, 'a']"), repr()
// inside containers, and tojson as transformers defines it (json.dumps, ensure_ascii=False).
// Thread-safety: values are immutable except namespaces, which live in one render.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/jinja_status.h"
#include "common/status.h"

namespace sluice::chat {

class Value;
struct ListObject;
struct DictObject;
struct NamespaceObject;
struct CallableObject;

using ListPtr = std::shared_ptr<const ListObject>;
using DictPtr = std::shared_ptr<const DictObject>;
using NamespacePtr = std::shared_ptr<NamespaceObject>;
using CallablePtr = std::shared_ptr<const CallableObject>;

enum class ValueKind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable };

class Value {
 public:
  Value() = default;  // undefined
  static Value undefined(std::string hint = {});
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value floating(double d);
  static Value string(std::string s);
  static Value list(std::vector<Value> items, bool is_tuple = false);
  // Later duplicate keys replace earlier ones; `keys_unique` skips that check.
  static Value dict(std::vector<std::pair<std::string, Value>> entries, bool keys_unique = false);
  static Value ns(NamespacePtr ns);
  static Value callable(CallablePtr fn);

  ValueKind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == ValueKind::kUndefined; }
  bool is_none() const { return kind_ == ValueKind::kNone; }
  bool is_bool() const { return kind_ == ValueKind::kBool; }
  bool is_int() const { return kind_ == ValueKind::kInt; }
  bool is_float() const { return kind_ == ValueKind::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }  // Python: bool is an int
  bool is_string() const { return kind_ == ValueKind::kString; }
  bool is_list() const { return kind_ == ValueKind::kList; }
  bool is_dict() const { return kind_ == ValueKind::kDict; }
  bool is_namespace() const { return kind_ == ValueKind::kNamespace; }
  bool is_callable() const { return kind_ == ValueKind::kCallable; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }  // also the 0/1 of a bool
  double as_float() const { return is_float() ? float_ : static_cast<double>(int_); }
  const std::string& as_string() const { return *string_; }
  const ListObject& as_list() const { return *list_; }
  const DictObject& as_dict() const { return *dict_; }
  const NamespacePtr& as_namespace() const { return ns_; }
  const CallableObject& as_callable() const { return *callable_; }
  const std::string& undefined_hint() const { return *string_; }
  // Levels of list/dict nesting: 0 for scalars, 1 for [1, 2], 2 for [[1]], ...
  int nesting_depth() const;

  // Python truthiness: empty containers, 0, "", None and undefined are false.
  bool truthy() const;
  // Python ==: 1 == 1.0 == True; containers compare element-wise; undefined equals only undefined.
  bool equals(const Value& other) const;
  // Python type name for error messages ("str", "int", "dict", "Undefined").
  std::string_view type_name() const;

 private:
  ValueKind kind_ = ValueKind::kUndefined;
  int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<const std::string> string_;  // string contents, or an undefined's hint
  ListPtr list_;
  DictPtr dict_;
  NamespacePtr ns_;
  CallablePtr callable_;
};

struct ListObject {
  std::vector<Value> items;
  bool is_tuple = false;
  int depth = 1;  // 1 + the deepest item's nesting_depth()
};

struct DictObject {
  std::vector<std::pair<std::string, Value>> entries;
  int depth = 1;
  // Key -> entry, for dicts past a few entries (a request's kwargs or tools can hold thousands:
  // a scan per lookup made a template over them quadratic). Views into `entries`, which never
  // change once the dict is made.
  std::unordered_map<std::string_view, size_t> index;
  DictObject() = default;
  DictObject(const DictObject&) = delete;  // a copy's index would point into the original
  DictObject& operator=(const DictObject&) = delete;
  // nullptr when absent.
  const Value* find(std::string_view key) const;
};

struct NamespaceObject {
  std::vector<std::pair<std::string, Value>> entries;
  const Value* find(std::string_view key) const;
  void set(std::string key, Value value);
};

// Arguments of a call as written: positional first, then name=value pairs.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  const Value* find_keyword(std::string_view name) const;
};

class Interpreter;
// A builtin function (or a method bound to `self`) or a macro; the interpreter calls it.
struct CallableObject {
  std::string name;
  std::function<Result<Value>(Interpreter&, const CallArgs&)> fn;
};

// Python ordering (<): numbers with numbers, strings with strings (code point order),
// lists/tuples element-wise. -1, 0 or 1; other pairs fail as Python's TypeError does.
Result<int> compare_values(const Value& a, const Value& b);

// Python str(): what {{ value }} prints. Undefined prints as "".
std::string to_str(const Value& v);
void append_str(const Value& v, std::string& out);
// Python repr(): how a value prints inside a list or dict ('a', 1.0, None, {'k': [1]}).
void append_repr(const Value& v, std::string& out);
// Python repr() of a float: shortest round-trip digits, "1.0", "1e+20", "inf", "nan".
std::string float_repr(double d);

struct JsonDumpOptions {
  int indent = -1;  // < 0: one line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
  size_t max_bytes = SIZE_MAX;  // fail rather than build a longer string
};
// json.dumps(value, ...) byte for byte. Fails (like Python) on undefined, namespaces and
// callables, and when nesting is deeper than `max_depth`.
Result<std::string> to_json(const Value& v, const JsonDumpOptions& options, int max_depth);

// Converts parsed JSON (a request body) into values; object key order is kept as stored
// (insertion order for ordered_json, sorted for json). Fails past `max_depth` nesting.
Result<Value> from_json(const nlohmann::ordered_json& j, int max_depth);
Result<Value> from_json(const nlohmann::json& j, int max_depth);

}  // namespace sluice::chat
