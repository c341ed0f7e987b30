// Whitespace control and tokenisation, checked through full renders (the lexer's output is
// only observable as text). Expected strings are jinja2's with trim_blocks + lstrip_blocks.
#include "chat/jinja_lexer.h"

#include <gtest/gtest.h>

#include "chat/test_util.h"

namespace sluice::chat {
namespace {

using testing::render;

TEST(JinjaLexer, TrimBlocksDropsTheNewlineAfterABlockTag) {
  EXPECT_EQ(render("{% if true %}\nyes\n{% endif %}\nafter"), "yes\nafter");
  EXPECT_EQ(render("{# comment #}\nx"), "x");
  // Only one newline goes, and never after a variable tag.
  EXPECT_EQ(render("{% if true %}\n\nyes{% endif %}"), "\nyes");
  EXPECT_EQ(render("{{ 'a' }}\nb"), "a\nb");
}

TEST(JinjaLexer, LstripBlocksDropsIndentationBeforeBlockTagsOnly) {
  //   "  {% if %}"  -> indentation removed
  //   "  {{ x }}"   -> indentation kept
  EXPECT_EQ(render("  {% if true %}\n  x\n  {% endif %}\n  {{ 'y' }}"), "  x\n  y");
  // Text before the tag on the same line is not indentation.
  EXPECT_EQ(render("a {% if true %}b{% endif %}"), "a b");
}

TEST(JinjaLexer, MinusStripsAllWhitespaceAndPlusDisablesTrimming) {
  EXPECT_EQ(render("a  \n {{- 'b' -}} \n  c"), "abc");
  EXPECT_EQ(render("a\n\n{%- if true -%}\n\n b \n\n{%- endif -%}\n\nc"), "abc");
  EXPECT_EQ(render("  {%+ if true %}x{% endif +%}\ny"), "  x\ny");
  EXPECT_EQ(render("a {#- c -#} b"), "ab");
}

TEST(JinjaLexer, NormalisesNewlinesAndDropsOneTrailingNewline) {
  EXPECT_EQ(render("a\r\nb\rc\n"), "a\nb\nc");
  EXPECT_EQ(render("a\n\n"), "a\n");
}

TEST(JinjaLexer, RawBlocksAreText) {
  EXPECT_EQ(render("{% raw %}{{ x }}{% if %}{% endraw %}!"), "{{ x }}{% if %}!");
  EXPECT_EQ(render("{%- raw -%}  {{ y }}  {%- endraw %}"), "{{ y }}");
}

TEST(JinjaLexer, DecodesPythonStringEscapes) {
  EXPECT_EQ(render(R"({{ 'a\nb\t\'\"\\\x41\u00e9\U0001F999\q' }})"), "a\nb\t'\"\\A\xC3\xA9\xF0\x9F\xA6\x99\\q");
  EXPECT_EQ(render("{{ 'adjacent' \"strings\" }}"), "adjacentstrings");
}

TEST(JinjaLexer, DictBracesInsideAVariableTagDoNotCloseIt) {
  EXPECT_EQ(render("{{ {'a': {'b': 1}} }}"), "{'a': {'b': 1}}");
}

TEST(JinjaLexer, ErrorsSayWhere) {
  EXPECT_EQ(render("ok\n  {{ 'a' "), "ERROR: chat template syntax error at line 2, column 3: missing '}}'");
  EXPECT_EQ(render("{# never closed"), "ERROR: chat template syntax error at line 1, column 1: unterminated comment");
  EXPECT_EQ(render("{{ 'abc }}"), "ERROR: chat template syntax error at line 1, column 4: unterminated string");
  EXPECT_EQ(render("{{ a ^ b }}"), "ERROR: chat template syntax error at line 1, column 6: unexpected character '^'");
  EXPECT_EQ(line_column("ab\ncd", 4), "line 2, column 2");
}

}  // namespace
}  // namespace sluice::chat
