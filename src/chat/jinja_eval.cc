// Expression evaluation for the Interpreter (the statement half is jinja_interpreter.cc).
#include "chat/jinja_builtins.h"
#include "chat/jinja_interpreter.h"
#include "chat/jinja_operators.h"

namespace sluice::chat {
namespace {

// Units of work an operation on `v` costs: its bytes or items.
size_t cost(const Value& v) {
  if (v.is_string()) return v.as_string().size() + 1;
  if (v.is_list()) return v.as_list().items.size() + 1;
  if (v.is_dict()) return v.as_dict().entries.size() + 1;
  return 1;
}

size_t cost(const CallArgs& args) {
  size_t total = 0;
  for (const Value& v : args.positional) total += cost(v);
  for (const auto& [k, v] : args.keyword) total += cost(v);
  return total;
}

}  // namespace

Result<Value> Interpreter::eval(const Expr& expr) {
  if (++steps_ > options_.limits.max_steps) {
    return Error("chat template error: more than {} evaluation steps", options_.limits.max_steps);
  }
  auto result = eval_inner(expr);
  if (!result) return std::unexpected(positioned(result.error(), expr.pos));
  return result;
}

Result<Value> Interpreter::eval_inner(const Expr& expr) {
  switch (expr.kind) {
    case ExprKind::kLiteral: return expr.literal;
    case ExprKind::kName: return lookup(expr.name);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(expr.children.size());
      for (const ExprPtr& child : expr.children) {
        SLUICE_ASSIGN_OR_RETURN(Value v, eval(*child));
        items.push_back(std::move(v));
      }
      return Value::list(std::move(items), expr.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      std::vector<std::pair<std::string, Value>> entries;
      for (size_t i = 0; i + 1 < expr.children.size(); i += 2) {
        SLUICE_ASSIGN_OR_RETURN(Value key, eval(*expr.children[i]));
        SLUICE_ASSIGN_OR_RETURN(Value value, eval(*expr.children[i + 1]));
        if (!key.is_string()) return Error("dict keys must be strings here, not {}", key.type_name());
        entries.emplace_back(key.as_string(), std::move(value));
      }
      return Value::dict(std::move(entries));
    }
    case ExprKind::kGetAttr: return eval_get_attr(expr);
    case ExprKind::kGetItem: return eval_get_item(expr);
    case ExprKind::kSlice: return eval_slice(expr);
    case ExprKind::kCall: return eval_call(expr);
    case ExprKind::kFilter: return eval_filter(expr);
    case ExprKind::kTest: return eval_test(expr);
    case ExprKind::kUnary: {
      SLUICE_ASSIGN_OR_RETURN(Value v, eval(*expr.children[0]));
      if (expr.name == "not") return Value::boolean(!v.truthy());
      return unary_op(expr.name, v);
    }
    case ExprKind::kBinary: return eval_binary(expr);
    case ExprKind::kCompare: return eval_compare(expr);
    case ExprKind::kCondExpr: {
      SLUICE_ASSIGN_OR_RETURN(Value cond, eval(*expr.children[0]));
      if (cond.truthy()) return eval(*expr.children[1]);
      if (!expr.children[2]) return Value::undefined("the inline if-expression evaluated to false and no else section was defined");
      return eval(*expr.children[2]);
    }
  }
  return Value();
}

Result<Value> Interpreter::eval_binary(const Expr& expr) {
  SLUICE_ASSIGN_OR_RETURN(Value left, eval(*expr.children[0]));
  if (expr.name == "and") return left.truthy() ? eval(*expr.children[1]) : left;
  if (expr.name == "or") return left.truthy() ? left : eval(*expr.children[1]);
  SLUICE_ASSIGN_OR_RETURN(Value right, eval(*expr.children[1]));
  const SizeLimits limits{options_.limits.max_output_bytes, options_.limits.max_list_items};
  SLUICE_ASSIGN_OR_RETURN(Value result, binary_op(expr.name, left, right, limits));
  SLUICE_RETURN_IF_ERROR(charge_work(cost(left) + cost(right) + cost(result)));
  return result;
}

Result<Value> Interpreter::eval_compare(const Expr& expr) {
  SLUICE_ASSIGN_OR_RETURN(Value left, eval(*expr.children[0]));
  for (size_t i = 0; i < expr.ops.size(); ++i) {
    SLUICE_ASSIGN_OR_RETURN(Value right, eval(*expr.children[i + 1]));
    SLUICE_RETURN_IF_ERROR(charge_work(cost(left) + cost(right)));
    const std::string& op = expr.ops[i];
    bool ok = false;
    if (op == "==") {
      ok = left.equals(right);
    } else if (op == "!=") {
      ok = !left.equals(right);
    } else if (op == "in" || op == "notin") {
      SLUICE_ASSIGN_OR_RETURN(bool found, contains(right, left));
      ok = (op == "in") == found;
    } else {
      SLUICE_ASSIGN_OR_RETURN(int c, compare_values(left, right));
      ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
    }
    if (!ok) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Result<Value> Interpreter::eval_get_attr(const Expr& expr) {
  SLUICE_ASSIGN_OR_RETURN(Value obj, eval(*expr.children[0]));
  return get_attr(obj, expr.name);
}

Result<Value> Interpreter::eval_get_item(const Expr& expr) {
  SLUICE_ASSIGN_OR_RETURN(Value obj, eval(*expr.children[0]));
  SLUICE_ASSIGN_OR_RETURN(Value key, eval(*expr.children[1]));
  if (obj.is_string()) SLUICE_RETURN_IF_ERROR(charge_work(cost(obj)));
  return get_item(obj, key);
}

Result<Value> Interpreter::eval_slice(const Expr& expr) {
  SLUICE_ASSIGN_OR_RETURN(Value obj, eval(*expr.children[0]));
  Value bounds[3];
  for (int i = 0; i < 3; ++i) {
    if (expr.children[i + 1]) {
      SLUICE_ASSIGN_OR_RETURN(bounds[i], eval(*expr.children[i + 1]));
    }
  }
  SLUICE_RETURN_IF_ERROR(charge_work(cost(obj)));
  return slice(obj, bounds[0], bounds[1], bounds[2]);
}

Result<CallArgs> Interpreter::eval_args(const Expr& expr, size_t first_child) {
  CallArgs args;
  for (size_t i = first_child; i < expr.children.size(); ++i) {
    SLUICE_ASSIGN_OR_RETURN(Value v, eval(*expr.children[i]));
    args.positional.push_back(std::move(v));
  }
  for (const auto& [name, value_expr] : expr.kwargs) {
    SLUICE_ASSIGN_OR_RETURN(Value v, eval(*value_expr));
    args.keyword.emplace_back(name, std::move(v));
  }
  return args;
}

Result<Value> Interpreter::eval_call(const Expr& expr) {
  SLUICE_ASSIGN_OR_RETURN(Value fn, eval(*expr.children[0]));
  SLUICE_ASSIGN_OR_RETURN(CallArgs args, eval_args(expr, 1));
  SLUICE_RETURN_IF_ERROR(charge_work(cost(fn) + cost(args)));
  SLUICE_ASSIGN_OR_RETURN(Value result, call(fn, args));
  SLUICE_RETURN_IF_ERROR(charge_work(cost(result)));
  return result;
}

Result<Value> Interpreter::eval_filter(const Expr& expr) {
  SLUICE_ASSIGN_OR_RETURN(Value operand, eval(*expr.children[0]));
  SLUICE_ASSIGN_OR_RETURN(CallArgs args, eval_args(expr, 1));
  SLUICE_RETURN_IF_ERROR(charge_work(cost(operand) + cost(args)));
  SLUICE_ASSIGN_OR_RETURN(Value result, apply_filter(*this, expr.name, operand, args));
  SLUICE_RETURN_IF_ERROR(charge_work(cost(result)));
  return result;
}

Result<Value> Interpreter::apply_filter_chain(const Expr& chain, const Value& value) {
  if (chain.kind != ExprKind::kFilter) return Error("expected a filter");
  Value operand = value;
  if (chain.children[0]) {
    SLUICE_ASSIGN_OR_RETURN(operand, apply_filter_chain(*chain.children[0], value));
  }
  SLUICE_ASSIGN_OR_RETURN(CallArgs args, eval_args(chain, 1));
  auto result = apply_filter(*this, chain.name, operand, args);
  if (!result) return std::unexpected(positioned(result.error(), chain.pos));
  return result;
}

Result<Value> Interpreter::eval_test(const Expr& expr) {
  SLUICE_ASSIGN_OR_RETURN(Value operand, eval(*expr.children[0]));
  SLUICE_ASSIGN_OR_RETURN(CallArgs args, eval_args(expr, 1));
  SLUICE_RETURN_IF_ERROR(charge_work(cost(operand) + cost(args)));
  SLUICE_ASSIGN_OR_RETURN(bool result, apply_test(*this, expr.name, operand, args));
  return Value::boolean(result != expr.negated);
}

}  // namespace sluice::chat
