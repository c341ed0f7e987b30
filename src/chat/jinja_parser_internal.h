// Internal to the parser: the Parser class. Its statement half is in jinja_parser.cc, its
// expression half in jinja_expr_parser.cc. Not part of the library's interface.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja_ast.h"
#include "chat/jinja_lexer.h"
#include "chat/jinja_parser.h"
#include "chat/jinja_status.h"

namespace sluice::chat::internal {

class Parser {
 public:
  explicit Parser(LexedTemplate lexed) : src_(std::move(lexed.source)), toks_(std::move(lexed.tokens)) {}

  Result<TemplateAst> run();

 private:
  // ---- token helpers ----
  const Token& peek(size_t ahead = 0) const { return toks_[std::min(idx_ + ahead, toks_.size() - 1)]; }
  const Token& next() {
    const Token& t = peek();
    if (idx_ < toks_.size() - 1) ++idx_;
    return t;
  }
  bool at_op(std::string_view op, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::kOperator && peek(ahead).value == op;
  }
  bool at_name(std::string_view name, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::kName && peek(ahead).value == name;
  }
  bool skip_op(std::string_view op) {
    if (!at_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!at_name(name)) return false;
    next();
    return true;
  }
  std::unexpected<Status> error(size_t pos, std::string_view message) const {
    return Error("chat template syntax error at {}: {}", line_column(src_, pos), message);
  }
  std::string describe(const Token& t) const {
    switch (t.kind) {
      case TokenKind::kEof: return "end of template";
      case TokenKind::kBlockEnd: return "'%}'";
      case TokenKind::kVarEnd: return "'}}'";
      case TokenKind::kText: return "text";
      default: return "'" + t.value + "'";
    }
  }
  Status expect_op(std::string_view op) {
    if (skip_op(op)) return Status::ok();
    return error(peek().pos, fmt::format("expected '{}', found {}", op, describe(peek()))).error();
  }
  Status expect_block_end() {
    if (peek().kind == TokenKind::kBlockEnd) {
      next();
      return Status::ok();
    }
    return error(peek().pos, fmt::format("expected '%}}', found {}", describe(peek()))).error();
  }
  Result<std::string> expect_name() {
    if (peek().kind != TokenKind::kName) return error(peek().pos, fmt::format("expected a name, found {}", describe(peek())));
    return next().value;
  }

  struct DepthGuard {
    explicit DepthGuard(int& d) : depth(d) { ++depth; }
    ~DepthGuard() { --depth; }
    int& depth;
  };
  // Each node a loop wraps around the previous one ("a + b + c", "x|f|g", "a.b.c") makes
  // the tree one level deeper; counting it keeps evaluation and destruction recursion bounded.
  struct ChainGuard {
    explicit ChainGuard(int& d) : depth(d) {}
    ~ChainGuard() { depth -= grown; }
    void grow() {
      ++depth;
      ++grown;
    }
    int& depth;
    int grown = 0;
  };
  Status check_depth(size_t pos) const {
    if (depth_ > kMaxParseDepth) return error(pos, "template nested too deeply").error();
    return Status::ok();
  }

  // ---- statements (jinja_parser.cc) ----
  // Parses until one of `end_tags` opens a block (its name is consumed and put in end_tag)
  // or, when end_tags is empty, until the end of the template.
  Result<Body> parse_body(std::initializer_list<std::string_view> end_tags, std::string& end_tag);
  Result<StmtPtr> parse_statement(size_t pos);
  Result<StmtPtr> parse_if(StmtPtr s);
  Result<StmtPtr> parse_for(StmtPtr s);
  Result<StmtPtr> parse_set(StmtPtr s);
  Result<StmtPtr> parse_macro(StmtPtr s);

  // ---- expressions (jinja_expr_parser.cc) ----
  static ExprPtr make(ExprKind kind, size_t pos, std::string name = {});
  // A tuple without parentheses ("a, b") or a single expression.
  Result<ExprPtr> parse_tuple(bool with_condexpr);
  bool starts_expression() const;
  Result<ExprPtr> parse_expression(bool with_condexpr);
  template <typename Sub>
  Result<ExprPtr> parse_binary_level(std::initializer_list<std::string_view> ops, bool names, Sub sub);
  Result<ExprPtr> parse_or();
  Result<ExprPtr> parse_and();
  Result<ExprPtr> parse_not();
  Result<ExprPtr> parse_compare();
  Result<ExprPtr> parse_math1();
  Result<ExprPtr> parse_concat();
  Result<ExprPtr> parse_math2();
  Result<ExprPtr> parse_pow();
  Result<ExprPtr> parse_unary_filtered();
  Result<ExprPtr> parse_unary(bool with_filter);
  Result<ExprPtr> parse_primary();
  Result<ExprPtr> parse_paren();
  Result<ExprPtr> parse_list();
  Result<ExprPtr> parse_dict();
  Result<ExprPtr> parse_postfix(ExprPtr node);
  Result<ExprPtr> parse_subscript(ExprPtr node);
  // "(" args ")" after a callee.
  Result<ExprPtr> parse_call(ExprPtr callee, ExprKind kind, std::string name);
  Status parse_args(Expr& e);
  Result<std::string> parse_dotted_name();
  // Any chain of |filter, is test and (call) after an operand (null in {% filter %}).
  Result<ExprPtr> parse_filter_chain(ExprPtr node);
  // `x is divisibleby 3`, `x is equalto 'a'`: one argument without parentheses.
  bool starts_test_argument() const;

  std::string src_;
  std::vector<Token> toks_;
  size_t idx_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;  // enclosing for loops, for break/continue
};

}  // namespace sluice::chat::internal
