// The chat template fuzz target on its seeds (the real templates of src/chat/testdata, alone
// and with each test case's context after a NUL byte): each real template must get through
// parse and render, so the target reaches the interpreter rather than stopping at its door;
// broken ones must stop with an error. `make fuzz` runs it coverage-guided from these seeds.
#include <cstring>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "chat/test_util.h"
#include "fuzz/chat_template_fuzz.h"

namespace sluice::chat {
namespace {

int run(const std::string& input) {
  return sluice_fuzz_chat_template(reinterpret_cast<const uint8_t*>(input.data()), input.size());
}

TEST(ChatTemplateFuzzTarget, RendersEveryRealTemplate) {
  const auto templates = testing::list_files(testing::testdata_dir() + "/templates", ".jinja");
  ASSERT_GE(templates.size(), 10u);
  for (const auto& path : templates) {
    EXPECT_EQ(run(testing::read_file(path)), 2) << path;
  }
}

TEST(ChatTemplateFuzzTarget, TakesTheContextAfterANulByte) {
  // The template and its NUL, then the context (appended, not `tmpl + '\0' + "..."`: g++ 12 at
  // -O1 reports a false array-bounds overflow in operator+ on a temporary string).
  const auto input = [](std::string_view context) {
    std::string s("{{ messages[0]['content'] }}");
    s += '\0';
    s += context;
    return s;
  };
  EXPECT_EQ(run(input(R"({"messages": [{"role": "user", "content": "x"}]})")), 2);
  EXPECT_EQ(run(input(R"({"messages": []})")), 1);  // index out of range: an error
  EXPECT_EQ(run(input(R"(not json 1e99999)")), 2);  // the default context
}

TEST(ChatTemplateFuzzTarget, StopsBrokenTemplatesWithAnError) {
  EXPECT_EQ(run("{% for %}"), 0);
  EXPECT_EQ(run("{{ raise_exception('no') }}"), 1);
  EXPECT_EQ(run("{% for i in range(99999999) %}{{ i }}{% endfor %}"), 1);  // over the limits
  EXPECT_EQ(run(std::string("\xff\x00\x01", 3)), 2);                      // plain text renders
}

}  // namespace
}  // namespace sluice::chat
