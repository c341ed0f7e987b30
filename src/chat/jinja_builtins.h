// The builtin library a chat template can call: filters and tests (jinja_filters.cc),
// methods of str/dict/list values and global functions (jinja_methods.cc).
//
// Each follows jinja2 / Python for the arguments real chat templates pass; anything
// outside that subset fails with a message naming the filter, test or method. Errors
// here carry no position: the interpreter adds "line L, column C" of the calling node.
#pragma once

#include <optional>
#include <string_view>

#include "chat/jinja_interpreter.h"
#include "chat/jinja_value.h"
#include "common/status.h"

namespace sluice::chat {

// Known at parse time, so an unknown filter or test fails like jinja2 does: at parse time.
bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

Result<Value> apply_filter(Interpreter& interp, std::string_view name, const Value& operand, const CallArgs& args);
Result<bool> apply_test(Interpreter& interp, std::string_view name, const Value& operand, const CallArgs& args);

// `receiver.name` when that is a method (str.strip, dict.items, ...): the bound method.
std::optional<Value> get_method(const Value& receiver, std::string_view name);

// range, namespace, dict, raise_exception and (when options.now is set) strftime_now.
std::optional<Value> get_global(std::string_view name, const RenderOptions& options);

// Argument helpers shared by filters and methods: the i-th positional or the named keyword.
const Value* find_arg(const CallArgs& args, size_t index, std::string_view name);

}  // namespace sluice::chat
