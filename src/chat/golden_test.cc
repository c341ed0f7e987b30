// Golden renders: every testdata/templates/*.jinja x testdata/cases/*.json must render
// byte for byte as testdata/expected/TEMPLATE/CASE.txt, which testdata/render.py produced
// with Python jinja2 set up as transformers sets it up. An expected "ERROR raise_exception:
// MSG" means the template must refuse the messages with exactly MSG (StatusCode::kInvalid).
//
// Regenerate after adding a template or case: src/chat/testdata/render.py --regenerate
#include <gtest/gtest.h>

#include "chat/test_util.h"

namespace sluice::chat {
namespace {

using testing::list_files;
using testing::read_file;
using testing::testdata_dir;

constexpr std::string_view kRaisePrefix = "ERROR raise_exception: ";

TEST(ChatGolden, EveryTemplateRendersEveryCaseLikeJinja2) {
  const auto templates = list_files(testdata_dir() + "/templates", ".jinja");
  const auto cases = list_files(testdata_dir() + "/cases", ".json");
  ASSERT_GE(templates.size(), 10u);
  ASSERT_GE(cases.size(), 5u);
  int num_checked = 0;
  for (const std::string& t : templates) {
    const std::string stem = t.substr(0, t.size() - 6);
    auto tmpl = ChatTemplate::parse(read_file(testdata_dir() + "/templates/" + t));
    ASSERT_TRUE(tmpl.has_value()) << t << ": " << tmpl.error().message();
    for (const std::string& c : cases) {
      const std::string case_name = c.substr(0, c.size() - 5);
      SCOPED_TRACE(stem + " x " + case_name);
      const testing::Case kase = testing::load_case(case_name);
      const std::string expected = read_file(testdata_dir() + "/expected/" + stem + "/" + case_name + ".txt");
      auto out = tmpl->render(kase.context, kase.options);
      if (expected.starts_with("ERROR")) {
        ASSERT_FALSE(out.has_value()) << "rendered:\n" << *out;
        if (expected.starts_with(kRaisePrefix)) {
          EXPECT_EQ(out.error().code(), StatusCode::kInvalid);
          EXPECT_EQ(out.error().message(), expected.substr(kRaisePrefix.size()));
        }
      } else {
        ASSERT_TRUE(out.has_value()) << out.error().message();
        EXPECT_EQ(*out, expected);
      }
      ++num_checked;
    }
  }
  EXPECT_EQ(num_checked, static_cast<int>(templates.size() * cases.size()));
}

TEST(ChatGolden, DefaultChatmlTemplateIsTheTestedFile) {
  EXPECT_EQ(default_chatml_template(), read_file(testdata_dir() + "/templates/sluice-default-chatml.jinja"));
}

}  // namespace
}  // namespace sluice::chat
