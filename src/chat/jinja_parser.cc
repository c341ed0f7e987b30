// Recursive-descent parser; see jinja_parser.h for the grammar it accepts.
#include "chat/jinja_parser.h"

#include "chat/jinja_parser_internal.h"

namespace sluice::chat {
namespace internal {

Result<TemplateAst> Parser::run() {
  std::string end_tag;
  SLUICE_ASSIGN_OR_RETURN(Body body, parse_body({}, end_tag));
  return TemplateAst{std::move(src_), std::move(body)};
}

// Parses until one of `end_tags` opens a block (its name is consumed and put in end_tag)
// or, when end_tags is empty, until the end of the template.
Result<Body> Parser::parse_body(std::initializer_list<std::string_view> end_tags, std::string& end_tag) {
  DepthGuard guard(depth_);
  SLUICE_RETURN_IF_ERROR(check_depth(peek().pos));
  Body body;
  for (;;) {
    const Token& t = peek();
    if (t.kind == TokenKind::kEof) {
      if (end_tags.size() == 0) return body;
      return error(t.pos, fmt::format("unexpected end of template, expected '{{% {} %}}'", *(end_tags.end() - 1)));
    }
    if (t.kind == TokenKind::kText) {
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::kText;
      s->pos = t.pos;
      s->text = next().value;
      body.push_back(std::move(s));
      continue;
    }
    if (t.kind == TokenKind::kVarBegin) {
      next();
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::kOutput;
      s->pos = t.pos;
      SLUICE_ASSIGN_OR_RETURN(s->expr, parse_tuple(true));
      if (peek().kind != TokenKind::kVarEnd) return error(peek().pos, fmt::format("expected '}}}}', found {}", describe(peek())));
      next();
      body.push_back(std::move(s));
      continue;
    }
    if (t.kind != TokenKind::kBlockBegin) return error(t.pos, fmt::format("unexpected {}", describe(t)));
    const Token& tag = peek(1);
    for (std::string_view end : end_tags) {
      if (tag.kind == TokenKind::kName && tag.value == end) {
        next();
        end_tag = next().value;
        return body;
      }
    }
    next();
    SLUICE_ASSIGN_OR_RETURN(StmtPtr stmt, parse_statement(t.pos));
    body.push_back(std::move(stmt));
  }
}

Result<StmtPtr> Parser::parse_statement(size_t pos) {
  const Token& tag = peek();
  if (tag.kind != TokenKind::kName) return error(tag.pos, fmt::format("expected a tag name, found {}", describe(tag)));
  const std::string name = next().value;
  auto s = std::make_unique<Stmt>();
  s->pos = pos;
  if (name == "if") return parse_if(std::move(s));
  if (name == "for") return parse_for(std::move(s));
  if (name == "set") return parse_set(std::move(s));
  if (name == "macro") return parse_macro(std::move(s));
  if (name == "break" || name == "continue") {
    if (loop_depth_ == 0) return error(tag.pos, fmt::format("'{}' outside loop", name));
    s->kind = name == "break" ? StmtKind::kBreak : StmtKind::kContinue;
    SLUICE_RETURN_IF_ERROR(expect_block_end());
    return s;
  }
  if (name == "filter" || name == "generation") {
    s->kind = name == "filter" ? StmtKind::kFilterBlock : StmtKind::kGeneration;
    if (name == "filter") {
      SLUICE_ASSIGN_OR_RETURN(s->expr, parse_filter_chain(nullptr));
    }
    SLUICE_RETURN_IF_ERROR(expect_block_end());
    std::string end;
    SLUICE_ASSIGN_OR_RETURN(Body body, parse_body({name == "filter" ? "endfilter" : "endgeneration"}, end));
    s->bodies.push_back(std::move(body));
    SLUICE_RETURN_IF_ERROR(expect_block_end());
    return s;
  }
  return error(tag.pos, fmt::format("unsupported tag '{}'", name));
}

Result<StmtPtr> Parser::parse_if(StmtPtr s) {
  s->kind = StmtKind::kIf;
  for (;;) {
    SLUICE_ASSIGN_OR_RETURN(ExprPtr cond, parse_tuple(true));
    SLUICE_RETURN_IF_ERROR(expect_block_end());
    std::string end;
    SLUICE_ASSIGN_OR_RETURN(Body body, parse_body({"elif", "else", "endif"}, end));
    s->conditions.push_back(std::move(cond));
    s->bodies.push_back(std::move(body));
    if (end == "elif") continue;
    if (end == "else") {
      SLUICE_RETURN_IF_ERROR(expect_block_end());
      SLUICE_ASSIGN_OR_RETURN(s->else_body, parse_body({"endif"}, end));
    }
    SLUICE_RETURN_IF_ERROR(expect_block_end());
    return s;
  }
}

Result<StmtPtr> Parser::parse_for(StmtPtr s) {
  s->kind = StmtKind::kFor;
  const bool parenthesised = skip_op("(");
  do {
    SLUICE_ASSIGN_OR_RETURN(std::string target, expect_name());
    s->targets.push_back(std::move(target));
  } while (skip_op(",") && peek().kind == TokenKind::kName && !at_name("in"));
  if (parenthesised) SLUICE_RETURN_IF_ERROR(expect_op(")"));
  if (!skip_name("in")) return error(peek().pos, fmt::format("expected 'in', found {}", describe(peek())));
  SLUICE_ASSIGN_OR_RETURN(s->expr, parse_tuple(false));
  if (skip_name("if")) {
    SLUICE_ASSIGN_OR_RETURN(s->filter, parse_tuple(true));
  }
  if (at_name("recursive")) return error(peek().pos, "recursive loops are not supported");
  SLUICE_RETURN_IF_ERROR(expect_block_end());
  std::string end;
  ++loop_depth_;
  auto body = parse_body({"else", "endfor"}, end);
  --loop_depth_;
  if (!body) return std::unexpected(body.error());
  s->bodies.push_back(std::move(*body));
  if (end == "else") {
    SLUICE_RETURN_IF_ERROR(expect_block_end());
    SLUICE_ASSIGN_OR_RETURN(s->else_body, parse_body({"endfor"}, end));
  }
  SLUICE_RETURN_IF_ERROR(expect_block_end());
  return s;
}

Result<StmtPtr> Parser::parse_set(StmtPtr s) {
  s->kind = StmtKind::kSet;
  SLUICE_ASSIGN_OR_RETURN(std::string target, expect_name());
  s->targets.push_back(std::move(target));
  if (skip_op(".")) {
    SLUICE_ASSIGN_OR_RETURN(std::string attr, expect_name());
    s->targets.push_back(std::move(attr));
    s->set_attribute = true;
  } else {
    while (skip_op(",")) {
      SLUICE_ASSIGN_OR_RETURN(std::string more, expect_name());
      s->targets.push_back(std::move(more));
    }
  }
  if (skip_op("=")) {
    SLUICE_ASSIGN_OR_RETURN(s->expr, parse_tuple(true));
    SLUICE_RETURN_IF_ERROR(expect_block_end());
    return s;
  }
  if (s->targets.size() != 1 || s->set_attribute) return error(peek().pos, "expected '='");
  if (at_op("|")) {
    SLUICE_ASSIGN_OR_RETURN(s->filter, parse_filter_chain(nullptr));
  }
  SLUICE_RETURN_IF_ERROR(expect_block_end());
  std::string end;
  SLUICE_ASSIGN_OR_RETURN(Body body, parse_body({"endset"}, end));
  s->bodies.push_back(std::move(body));
  SLUICE_RETURN_IF_ERROR(expect_block_end());
  return s;
}

Result<StmtPtr> Parser::parse_macro(StmtPtr s) {
  s->kind = StmtKind::kMacro;
  SLUICE_ASSIGN_OR_RETURN(s->name, expect_name());
  SLUICE_RETURN_IF_ERROR(expect_op("("));
  while (!at_op(")")) {
    MacroParam param;
    SLUICE_ASSIGN_OR_RETURN(param.name, expect_name());
    if (skip_op("=")) {
      SLUICE_ASSIGN_OR_RETURN(param.default_value, parse_expression(true));
    }
    s->params.push_back(std::move(param));
    if (!skip_op(",")) break;
  }
  SLUICE_RETURN_IF_ERROR(expect_op(")"));
  SLUICE_RETURN_IF_ERROR(expect_block_end());
  std::string end;
  const int saved_loop_depth = loop_depth_;
  loop_depth_ = 0;
  auto body = parse_body({"endmacro"}, end);
  loop_depth_ = saved_loop_depth;
  if (!body) return std::unexpected(body.error());
  s->bodies.push_back(std::move(*body));
  if (peek().kind == TokenKind::kName && peek().value == s->name) next();
  SLUICE_RETURN_IF_ERROR(expect_block_end());
  return s;
}

}  // namespace internal

Result<TemplateAst> parse_template(std::string_view source) {
  SLUICE_ASSIGN_OR_RETURN(LexedTemplate lexed, lex_template(source));
  return internal::Parser(std::move(lexed)).run();
}

}  // namespace sluice::chat
