// Robustness: thousands of random mutations of the real templates (deterministic seed) go
// through parse + render. Every one must come back as a value or an error -- no crash, no
// hang, no exception -- within tight limits. Run under ASan/UBSan to catch memory errors.
#include <random>

#include <gtest/gtest.h>

#include "chat/test_util.h"

namespace sluice::chat {
namespace {

using testing::list_files;
using testing::read_file;
using testing::testdata_dir;

// Fragments that make mutations likely to stay near-valid Jinja, so they reach deep code.
constexpr std::string_view kFragments[] = {
    "{%", "%}", "{{", "}}", "{#", "#}", "{%-", "-%}", "(", ")", "[", "]", "{", "}", "'", "\"", "|", ".", ",", ":",
    "-", "+", "*", "**", "//", "~", "==", " in ", " not ", " is ", " if ", " else ", "for ", "endfor", "if ",
    "endif", "set ", "macro ", "endmacro", "namespace(", "loop.", "messages", "[::-1]", "|tojson", "|trim",
    "|length", "|join", "|selectattr(", "raise_exception(", "range(", "9999999", "-1", "0", "none", "true",
    "\\", "\n", " ", "\xC3\xA9", "\xFF", "{% raw %}", "{% endraw %}", "break", "continue", "x", "=", "items()"};

std::string mutate(std::string s, std::mt19937& rng) {
  const int num_edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < num_edits; ++e) {
    const size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 6) {
      case 0:  // flip a byte
        if (!s.empty()) s[std::min(pos, s.size() - 1)] = static_cast<char>(rng() % 256);
        break;
      case 1:  // delete a range
        if (!s.empty()) s.erase(std::min(pos, s.size() - 1), 1 + rng() % 16);
        break;
      case 2:  // duplicate a range
        if (!s.empty()) {
          const size_t from = rng() % s.size();
          s.insert(pos, s.substr(from, 1 + rng() % 64));
        }
        break;
      default: {  // insert a Jinja fragment
        const auto& frag = kFragments[rng() % std::size(kFragments)];
        s.insert(pos, frag);
      }
    }
  }
  return s;
}

TEST(ChatMutation, RandomMutationsOfRealTemplatesNeverCrashOrHang) {
  std::mt19937 rng(20240726);
  const auto templates = list_files(testdata_dir() + "/templates", ".jinja");
  const testing::Case kase = testing::load_case("tools");
  RenderOptions options = kase.options;
  options.limits.max_output_bytes = 1 << 16;
  options.limits.max_list_items = 1 << 12;
  options.limits.max_loop_iterations = 20'000;
  options.limits.max_steps = 200'000;
  options.limits.max_work = 2'000'000;
  options.limits.max_call_depth = 8;
  constexpr int kPerTemplate = 400;
  int num_parsed = 0;
  int num_rendered = 0;
  for (const std::string& t : templates) {
    const std::string source = read_file(testdata_dir() + "/templates/" + t);
    for (int i = 0; i < kPerTemplate; ++i) {
      const std::string mutated = mutate(source, rng);
      auto tmpl = ChatTemplate::parse(mutated);
      if (!tmpl) {
        EXPECT_FALSE(tmpl.error().message().empty());
        continue;
      }
      ++num_parsed;
      auto out = tmpl->render(kase.context, options);
      if (out) ++num_rendered;
    }
  }
  // The mutations must exercise the renderer, not only the parser's error paths.
  EXPECT_GT(num_parsed, static_cast<int>(templates.size()) * kPerTemplate / 10);
  EXPECT_GT(num_rendered, 0);
  std::printf("%zu templates x %d mutations: %d parsed, %d rendered\n", templates.size(), kPerTemplate, num_parsed,
              num_rendered);
}

TEST(ChatMutation, RandomFragmentSoupNeverCrashes) {
  std::mt19937 rng(7);
  RenderOptions options;
  options.limits.max_steps = 100'000;
  options.limits.max_loop_iterations = 10'000;
  for (int i = 0; i < 3000; ++i) {
    std::string s;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int k = 0; k < n; ++k) s += kFragments[rng() % std::size(kFragments)];
    auto tmpl = ChatTemplate::parse(s);
    if (tmpl) (void)tmpl->render(nlohmann::json{{"messages", nlohmann::json::array({{{"role", "user"}, {"content", "x"}}})}}, options);
  }
  SUCCEED();
}

}  // namespace
}  // namespace sluice::chat
