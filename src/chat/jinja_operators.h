// Python operators on Values: arithmetic, concatenation, membership, subscripts, slices and
// attribute lookup, with Python's results and TypeErrors (ints are int64: overflow fails).
//
// Undefined operands fail with the undefined value's own message ("'x' is undefined",
// "'dict object' has no attribute 'y'"), as jinja2's default Undefined does, except where
// jinja2 lets undefined through: `~` (prints ""), `in` (empty), ==/!=.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "chat/jinja_value.h"
#include "common/status.h"

namespace sluice::chat {

struct SizeLimits {
  size_t max_string_bytes;
  size_t max_list_items;
};

// op: "+" "-" "*" "/" "//" "%" "**" "~"
Result<Value> binary_op(std::string_view op, const Value& a, const Value& b, const SizeLimits& limits);
// op: "-" "+" (not is handled by the caller: it never fails)
Result<Value> unary_op(std::string_view op, const Value& v);
// The items `for x in v` visits: list items, dict keys, string code points; undefined is
// empty; anything else is not iterable.
Result<std::vector<Value>> iterate(const Value& v, size_t max_items);
// Python `item in container`.
Result<bool> contains(const Value& container, const Value& item);
// obj[key]: list/str index (negative from the end), dict key; missing -> undefined.
Result<Value> get_item(const Value& obj, const Value& key);
// obj.name: a method of str/dict/list, else dict key or namespace attribute; missing -> undefined.
Result<Value> get_attr(const Value& obj, std::string_view name);
// obj[start:stop:step] on lists, tuples and strings (code points).
Result<Value> slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

}  // namespace sluice::chat
