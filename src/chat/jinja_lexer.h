// Jinja lexer: template source -> a flat token list, with every whitespace rule already
// applied to the text between tags, so the parser never thinks about whitespace.
//
// Whitespace rules are jinja2's with the options transformers uses (trim_blocks=True,
// lstrip_blocks=True, keep_trailing_newline=False):
//   - newlines are normalised to "\n" and one trailing newline of the template is dropped;
//   - `{%-`, `{{-`, `{#-` strip all whitespace before the tag; `-%}`, `-}}`, `-#}` after it;
//   - trim_blocks: the first "\n" after a block or comment tag is dropped (`+%}` keeps it);
//   - lstrip_blocks: spaces and tabs between the start of a line and a block or comment tag
//     are dropped (`{%+` keeps them); variable tags `{{` are never lstripped;
//   - `{% raw %}...{% endraw %}` is text, untouched.
// Tokens carry their byte offset in the normalised source; line_column() turns it into the
// "line L, column C" users see in error messages.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace sluice::chat {

enum class TokenKind {
  kText,        // literal template text (value holds it)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,        // identifier or keyword (value)
  kString,      // string literal, escapes decoded (value)
  kInt,         // integer literal (value holds the digits, underscores removed)
  kFloat,       // float literal (value)
  kOperator,    // + - * / // % ** ~ == != < <= > >= = ( ) [ ] { } , . : |
  kEof,
};

struct Token {
  TokenKind kind = TokenKind::kEof;
  std::string value;
  size_t pos = 0;  // byte offset in the normalised source
};

struct LexedTemplate {
  std::string source;  // normalised source (newlines "\n"), for positions
  std::vector<Token> tokens;  // ends with kEof
};

// Fails on an unterminated tag, comment, string or raw block, or an unknown character.
Result<LexedTemplate> lex_template(std::string_view source);

// "line L, column C" (1-based; columns count bytes) of byte offset `pos` in `source`.
std::string line_column(std::string_view source, size_t pos);

}  // namespace sluice::chat
