// Jinja parser: token list (jinja_lexer) -> syntax tree (jinja_ast).
//
// Recursive descent with jinja2's operator precedence, lowest first:
//   x if c else y | or | and | not | comparisons (== != < <= > >= in, not in; chained)
//   | + - | ~ | * / // % | ** | unary - + | postfix (.attr [item] [a:b:c] (call))
//   followed by any chain of |filter, is test and (call).
// Statements: if/elif/else, for (with tuple targets, `if` filter, else), set (plain,
// namespace attribute, block), macro, break/continue, filter blocks, generation blocks.
// include/import/extends/block/call are refused with an error naming the tag.
//
// Nesting of statements and expressions is capped (kMaxParseDepth), so hostile input
// cannot exhaust the stack; every failure says where ("line L, column C").
#pragma once

#include <string_view>

#include "chat/jinja_ast.h"
#include "common/status.h"

namespace sluice::chat {

inline constexpr int kMaxParseDepth = 256;

Result<TemplateAst> parse_template(std::string_view source);

}  // namespace sluice::chat
