// Expression half of the parser (jinja_parser.h lists the precedence levels).
#include <charconv>
#include <cstdlib>

#include "chat/jinja_builtins.h"
#include "chat/jinja_parser_internal.h"

namespace sluice::chat::internal {

ExprPtr Parser::make(ExprKind kind, size_t pos, std::string name) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->pos = pos;
  e->name = std::move(name);
  return e;
}

// A tuple without parentheses ("a, b") or a single expression.
Result<ExprPtr> Parser::parse_tuple(bool with_condexpr) {
  const size_t pos = peek().pos;
  SLUICE_ASSIGN_OR_RETURN(ExprPtr first, parse_expression(with_condexpr));
  if (!at_op(",")) return first;
  auto tuple = make(ExprKind::kTuple, pos);
  tuple->children.push_back(std::move(first));
  while (skip_op(",")) {
    if (!starts_expression()) break;
    SLUICE_ASSIGN_OR_RETURN(ExprPtr item, parse_expression(with_condexpr));
    tuple->children.push_back(std::move(item));
  }
  return tuple;
}

bool Parser::starts_expression() const {
  const Token& t = peek();
  if (t.kind == TokenKind::kName) return t.value != "in" && t.value != "if" && t.value != "else";
  if (t.kind == TokenKind::kString || t.kind == TokenKind::kInt || t.kind == TokenKind::kFloat) return true;
  return at_op("(") || at_op("[") || at_op("{") || at_op("-") || at_op("+");
}

Result<ExprPtr> Parser::parse_expression(bool with_condexpr) {
  DepthGuard guard(depth_);
  SLUICE_RETURN_IF_ERROR(check_depth(peek().pos));
  if (!with_condexpr) return parse_or();
  SLUICE_ASSIGN_OR_RETURN(ExprPtr expr, parse_or());
  ChainGuard chain(depth_);
  while (at_name("if")) {
    const size_t pos = next().pos;
    chain.grow();
    SLUICE_RETURN_IF_ERROR(check_depth(pos));
    auto cond = make(ExprKind::kCondExpr, pos);
    SLUICE_ASSIGN_OR_RETURN(ExprPtr test, parse_or());
    ExprPtr otherwise;
    if (skip_name("else")) {
      SLUICE_ASSIGN_OR_RETURN(otherwise, parse_expression(true));
    }
    cond->children.push_back(std::move(test));
    cond->children.push_back(std::move(expr));
    cond->children.push_back(std::move(otherwise));
    expr = std::move(cond);
  }
  return expr;
}

template <typename Sub>
Result<ExprPtr> Parser::parse_binary_level(std::initializer_list<std::string_view> ops, bool names, Sub sub) {
  SLUICE_ASSIGN_OR_RETURN(ExprPtr left, (this->*sub)());
  ChainGuard chain(depth_);
  for (;;) {
    std::string op;
    for (std::string_view o : ops) {
      if (names ? at_name(o) : at_op(o)) op = o;
    }
    if (op.empty()) return left;
    const size_t pos = next().pos;
    chain.grow();
    SLUICE_RETURN_IF_ERROR(check_depth(pos));
    SLUICE_ASSIGN_OR_RETURN(ExprPtr right, (this->*sub)());
    auto bin = make(ExprKind::kBinary, pos, op);
    bin->children.push_back(std::move(left));
    bin->children.push_back(std::move(right));
    left = std::move(bin);
  }
}

Result<ExprPtr> Parser::parse_or() { return parse_binary_level({"or"}, true, &Parser::parse_and); }

Result<ExprPtr> Parser::parse_and() { return parse_binary_level({"and"}, true, &Parser::parse_not); }

Result<ExprPtr> Parser::parse_not() {
  if (at_name("not")) {
    const size_t pos = next().pos;
    DepthGuard guard(depth_);
    SLUICE_RETURN_IF_ERROR(check_depth(pos));
    SLUICE_ASSIGN_OR_RETURN(ExprPtr operand, parse_not());
    auto e = make(ExprKind::kUnary, pos, "not");
    e->children.push_back(std::move(operand));
    return e;
  }
  return parse_compare();
}

Result<ExprPtr> Parser::parse_compare() {
  const size_t pos = peek().pos;
  SLUICE_ASSIGN_OR_RETURN(ExprPtr left, parse_math1());
  ExprPtr cmp;
  for (;;) {
    std::string op;
    if (peek().kind == TokenKind::kOperator &&
        (peek().value == "==" || peek().value == "!=" || peek().value == "<" || peek().value == "<=" ||
         peek().value == ">" || peek().value == ">=")) {
      op = next().value;
    } else if (skip_name("in")) {
      op = "in";
    } else if (at_name("not") && at_name("in", 1)) {
      next();
      next();
      op = "notin";
    } else {
      break;
    }
    if (!cmp) {
      cmp = make(ExprKind::kCompare, pos);
      cmp->children.push_back(std::move(left));
    }
    SLUICE_ASSIGN_OR_RETURN(ExprPtr right, parse_math1());
    cmp->ops.push_back(std::move(op));
    cmp->children.push_back(std::move(right));
  }
  return cmp ? std::move(cmp) : std::move(left);
}

Result<ExprPtr> Parser::parse_math1() { return parse_binary_level({"+", "-"}, false, &Parser::parse_concat); }

Result<ExprPtr> Parser::parse_concat() { return parse_binary_level({"~"}, false, &Parser::parse_math2); }

Result<ExprPtr> Parser::parse_math2() { return parse_binary_level({"*", "/", "//", "%"}, false, &Parser::parse_pow); }

Result<ExprPtr> Parser::parse_pow() { return parse_binary_level({"**"}, false, &Parser::parse_unary_filtered); }

Result<ExprPtr> Parser::parse_unary_filtered() { return parse_unary(true); }

Result<ExprPtr> Parser::parse_unary(bool with_filter) {
  DepthGuard guard(depth_);
  SLUICE_RETURN_IF_ERROR(check_depth(peek().pos));
  ExprPtr node;
  if (at_op("-") || at_op("+")) {
    const Token& t = next();
    node = make(ExprKind::kUnary, t.pos, t.value);
    SLUICE_ASSIGN_OR_RETURN(ExprPtr operand, parse_unary(false));
    node->children.push_back(std::move(operand));
  } else {
    SLUICE_ASSIGN_OR_RETURN(node, parse_primary());
  }
  SLUICE_ASSIGN_OR_RETURN(node, parse_postfix(std::move(node)));
  if (with_filter) return parse_filter_chain(std::move(node));
  return node;
}

Result<ExprPtr> Parser::parse_primary() {
  const Token& t = peek();
  switch (t.kind) {
    case TokenKind::kName: {
      next();
      auto e = make(ExprKind::kLiteral, t.pos);
      if (t.value == "true" || t.value == "True") {
        e->literal = Value::boolean(true);
      } else if (t.value == "false" || t.value == "False") {
        e->literal = Value::boolean(false);
      } else if (t.value == "none" || t.value == "None") {
        e->literal = Value::none();
      } else {
        e->kind = ExprKind::kName;
        e->name = t.value;
      }
      return e;
    }
    case TokenKind::kString: {
      std::string s = next().value;
      while (peek().kind == TokenKind::kString) s += next().value;  // "a" "b" -> "ab"
      auto e = make(ExprKind::kLiteral, t.pos);
      e->literal = Value::string(std::move(s));
      return e;
    }
    case TokenKind::kInt: {
      next();
      int64_t v = 0;
      auto [ptr, ec] = std::from_chars(t.value.data(), t.value.data() + t.value.size(), v);
      if (ec != std::errc()) return error(t.pos, "integer literal out of range");
      auto e = make(ExprKind::kLiteral, t.pos);
      e->literal = Value::integer(v);
      return e;
    }
    case TokenKind::kFloat: {
      next();
      auto e = make(ExprKind::kLiteral, t.pos);
      e->literal = Value::floating(std::strtod(t.value.c_str(), nullptr));
      return e;
    }
    case TokenKind::kOperator:
      if (t.value == "(") return parse_paren();
      if (t.value == "[") return parse_list();
      if (t.value == "{") return parse_dict();
      [[fallthrough]];
    default: return error(t.pos, fmt::format("unexpected {}", describe(t)));
  }
}

Result<ExprPtr> Parser::parse_paren() {
  const size_t pos = next().pos;
  if (skip_op(")")) return make(ExprKind::kTuple, pos);
  SLUICE_ASSIGN_OR_RETURN(ExprPtr first, parse_expression(true));
  if (skip_op(")")) return first;
  auto tuple = make(ExprKind::kTuple, pos);
  tuple->children.push_back(std::move(first));
  while (skip_op(",")) {
    if (at_op(")")) break;
    SLUICE_ASSIGN_OR_RETURN(ExprPtr item, parse_expression(true));
    tuple->children.push_back(std::move(item));
  }
  SLUICE_RETURN_IF_ERROR(expect_op(")"));
  return tuple;
}

Result<ExprPtr> Parser::parse_list() {
  auto list = make(ExprKind::kList, next().pos);
  while (!at_op("]")) {
    SLUICE_ASSIGN_OR_RETURN(ExprPtr item, parse_expression(true));
    list->children.push_back(std::move(item));
    if (!skip_op(",")) break;
  }
  SLUICE_RETURN_IF_ERROR(expect_op("]"));
  return list;
}

Result<ExprPtr> Parser::parse_dict() {
  auto dict = make(ExprKind::kDict, next().pos);
  while (!at_op("}")) {
    SLUICE_ASSIGN_OR_RETURN(ExprPtr key, parse_expression(true));
    SLUICE_RETURN_IF_ERROR(expect_op(":"));
    SLUICE_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
    dict->children.push_back(std::move(key));
    dict->children.push_back(std::move(value));
    if (!skip_op(",")) break;
  }
  SLUICE_RETURN_IF_ERROR(expect_op("}"));
  return dict;
}

Result<ExprPtr> Parser::parse_postfix(ExprPtr node) {
  ChainGuard chain(depth_);
  for (;;) {
    chain.grow();
    SLUICE_RETURN_IF_ERROR(check_depth(peek().pos));
    if (at_op(".")) {
      const size_t pos = next().pos;
      const Token& t = next();
      if (t.kind == TokenKind::kName) {
        auto e = make(ExprKind::kGetAttr, pos, t.value);
        e->children.push_back(std::move(node));
        node = std::move(e);
      } else if (t.kind == TokenKind::kInt) {
        auto e = make(ExprKind::kGetItem, pos);
        auto index = make(ExprKind::kLiteral, t.pos);
        index->literal = Value::integer(std::atoll(t.value.c_str()));
        e->children.push_back(std::move(node));
        e->children.push_back(std::move(index));
        node = std::move(e);
      } else {
        return error(t.pos, fmt::format("expected an attribute name, found {}", describe(t)));
      }
    } else if (at_op("[")) {
      SLUICE_ASSIGN_OR_RETURN(node, parse_subscript(std::move(node)));
    } else if (at_op("(")) {
      SLUICE_ASSIGN_OR_RETURN(node, parse_call(std::move(node), ExprKind::kCall, ""));
    } else {
      return node;
    }
  }
}

Result<ExprPtr> Parser::parse_subscript(ExprPtr node) {
  const size_t pos = next().pos;
  ExprPtr bounds[3];
  int part = 0;
  bool is_slice = false;
  for (;;) {
    if (at_op(":")) {
      next();
      is_slice = true;
      if (++part > 2) return error(pos, "too many ':' in subscript");
      continue;
    }
    if (at_op("]")) break;
    if (bounds[part]) return error(peek().pos, "expected ':' or ']'");
    SLUICE_ASSIGN_OR_RETURN(bounds[part], parse_expression(true));
  }
  next();
  if (!is_slice) {
    if (!bounds[0]) return error(pos, "empty subscript");
    auto e = make(ExprKind::kGetItem, pos);
    e->children.push_back(std::move(node));
    e->children.push_back(std::move(bounds[0]));
    return e;
  }
  auto e = make(ExprKind::kSlice, pos);
  e->children.push_back(std::move(node));
  for (auto& b : bounds) e->children.push_back(std::move(b));
  return e;
}

// "(" args ")" after a callee.
Result<ExprPtr> Parser::parse_call(ExprPtr callee, ExprKind kind, std::string name) {
  auto e = make(kind, next().pos, std::move(name));
  e->children.push_back(std::move(callee));
  SLUICE_RETURN_IF_ERROR(parse_args(*e));
  return e;
}

Status Parser::parse_args(Expr& e) {
  while (!at_op(")")) {
    if (peek().kind == TokenKind::kName && at_op("=", 1)) {
      std::string key = next().value;
      next();
      SLUICE_CHAT_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
      e.kwargs.emplace_back(std::move(key), std::move(value));
    } else {
      if (!e.kwargs.empty()) return error(peek().pos, "positional argument after keyword argument").error();
      SLUICE_CHAT_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
      e.children.push_back(std::move(value));
    }
    if (!skip_op(",")) break;
  }
  return expect_op(")");
}

Result<std::string> Parser::parse_dotted_name() {
  SLUICE_ASSIGN_OR_RETURN(std::string name, expect_name());
  while (at_op(".") && peek(1).kind == TokenKind::kName) {
    next();
    name += "." + next().value;
  }
  return name;
}

// Any chain of |filter, is test and (call) after an operand (null in {% filter %}).
Result<ExprPtr> Parser::parse_filter_chain(ExprPtr node) {
  const bool block_filter = node == nullptr;
  ChainGuard chain(depth_);
  for (;;) {
    chain.grow();
    SLUICE_RETURN_IF_ERROR(check_depth(peek().pos));
    if (at_op("|") || (block_filter && node == nullptr)) {
      const size_t pos = at_op("|") ? next().pos : peek().pos;
      SLUICE_ASSIGN_OR_RETURN(std::string name, parse_dotted_name());
      if (!is_known_filter(name)) return error(pos, fmt::format("no filter named '{}'", name));
      auto e = make(ExprKind::kFilter, pos, std::move(name));
      e->children.push_back(std::move(node));
      if (skip_op("(")) SLUICE_RETURN_IF_ERROR(parse_args(*e));
      node = std::move(e);
    } else if (at_name("is")) {
      const size_t pos = next().pos;
      const bool negated = skip_name("not");
      SLUICE_ASSIGN_OR_RETURN(std::string name, parse_dotted_name());
      if (!is_known_test(name)) return error(pos, fmt::format("no test named '{}'", name));
      auto e = make(ExprKind::kTest, pos, std::move(name));
      e->negated = negated;
      e->children.push_back(std::move(node));
      if (at_op("(")) {
        next();
        SLUICE_RETURN_IF_ERROR(parse_args(*e));
      } else if (starts_test_argument()) {
        SLUICE_ASSIGN_OR_RETURN(ExprPtr arg, parse_primary());
        SLUICE_ASSIGN_OR_RETURN(arg, parse_postfix(std::move(arg)));
        e->children.push_back(std::move(arg));
      }
      node = std::move(e);
    } else if (at_op("(") && !block_filter) {
      SLUICE_ASSIGN_OR_RETURN(node, parse_call(std::move(node), ExprKind::kCall, ""));
    } else {
      return node;
    }
  }
}

// `x is divisibleby 3`, `x is equalto 'a'`: one argument without parentheses.
bool Parser::starts_test_argument() const {
  const Token& t = peek();
  if (t.kind == TokenKind::kName) {
    return t.value != "else" && t.value != "or" && t.value != "and" && t.value != "if" && t.value != "in" &&
           t.value != "is" && t.value != "not";
  }
  return t.kind == TokenKind::kString || t.kind == TokenKind::kInt || t.kind == TokenKind::kFloat || at_op("[") ||
         at_op("{");
}
}  // namespace sluice::chat::internal
