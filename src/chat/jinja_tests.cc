// Jinja tests (`x is defined`, `x is equalto y`, ...), with jinja2's definitions: `number`
// includes booleans, `integer` does not, `iterable` and `sequence` hold for str/list/dict
// (and `iterable` for undefined, which iterates as empty), `true`/`false` are identity.
#include <algorithm>
#include <array>

#include "chat/jinja_builtins.h"
#include "chat/jinja_operators.h"
#include "chat/jinja_text.h"

namespace sluice::chat {
namespace {

constexpr std::array<std::string_view, 32> kTests = {
    "defined", "undefined", "none",     "string", "number",   "integer",     "float",   "mapping",
    "iterable", "sequence", "boolean",  "true",   "false",    "equalto",     "eq",      "==",
    "ne",       "!=",       "lt",       "<",      "le",       "<=",          "gt",      ">",
    "ge",       ">=",       "in",       "odd",    "even",     "divisibleby", "callable", "sameas"};

Result<bool> compare_test(std::string_view name, const Value& a, const Value& b) {
  if (name == "equalto" || name == "eq" || name == "==") return a.equals(b);
  if (name == "ne" || name == "!=") return !a.equals(b);
  SLUICE_ASSIGN_OR_RETURN(int c, compare_values(a, b));
  if (name == "lt" || name == "<") return c < 0;
  if (name == "le" || name == "<=") return c <= 0;
  if (name == "gt" || name == ">") return c > 0;
  return c >= 0;
}

}  // namespace

bool is_known_test(std::string_view name) {
  return std::find(kTests.begin(), kTests.end(), name) != kTests.end() || name == "lower" || name == "upper";
}

Result<bool> apply_test(Interpreter&, std::string_view name, const Value& v, const CallArgs& args) {
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  if (name == "sequence") return v.is_string() || v.is_list() || v.is_dict();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "callable") return v.is_callable();
  if (name == "lower") return v.is_string() && py_lower(v.as_string()) == v.as_string();
  if (name == "upper") return v.is_string() && py_upper(v.as_string()) == v.as_string();
  if (name == "odd" || name == "even") {
    if (v.is_undefined()) return Error("{}", v.undefined_hint());
    if (!v.is_number() || v.is_float()) return Error("test '{}' needs an integer, not {}", name, v.type_name());
    return (v.as_int() % 2 != 0) == (name == "odd");
  }
  const Value* other = find_arg(args, 0, name == "divisibleby" ? "num" : "other");
  if (other == nullptr) {
    if (name == "in") other = find_arg(args, 0, "seq");
    if (other == nullptr) return Error("test '{}' needs an argument", name);
  }
  if (name == "in") return contains(*other, v);
  // Identity is approximated by kind + equality (exact for None, booleans, small ints).
  if (name == "sameas") return v.kind() == other->kind() && v.equals(*other);
  if (name == "divisibleby") {
    if (!v.is_number() || v.is_float() || !other->is_number() || other->is_float()) {
      return Error("test 'divisibleby' needs integers");
    }
    if (other->as_int() == 0) return Error("integer division or modulo by zero");
    if (other->as_int() == -1) return true;
    return v.as_int() % other->as_int() == 0;
  }
  return compare_test(name, v, *other);
}

}  // namespace sluice::chat
