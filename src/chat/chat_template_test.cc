// ChatTemplate's contract: the default ChatML template, errors as values with positions,
// raise_exception as kInvalid, the injected clock, key order, and every resource limit.
#include "chat/chat_template.h"

#include <gtest/gtest.h>

#include "chat/test_util.h"

namespace sluice::chat {
namespace {

nlohmann::ordered_json chat(bool add_generation_prompt) {
  return {{"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}}},
          {"add_generation_prompt", add_generation_prompt}};
}

TEST(ChatTemplate, DefaultChatmlRendersEveryTurnAndTheGenerationPrompt) {
  auto tmpl = ChatTemplate::parse(default_chatml_template());
  ASSERT_TRUE(tmpl.has_value());
  EXPECT_EQ(*tmpl->render(chat(true)),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(*tmpl->render(chat(false)), "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplate, ParseErrorsNameLineAndColumn) {
  auto tmpl = ChatTemplate::parse("line one\n{% for x in %}");
  ASSERT_FALSE(tmpl.has_value());
  EXPECT_EQ(tmpl.error().message(), "chat template syntax error at line 2, column 13: unexpected '%}'");
}

TEST(ChatTemplate, RaiseExceptionIsAnInvalidRequestWithTheTemplatesMessage) {
  auto tmpl = ChatTemplate::parse(
      "{% for m in messages %}{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}"
      "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% endfor %}");
  ASSERT_TRUE(tmpl.has_value());
  auto out = tmpl->render(nlohmann::json{{"messages", {{{"role", "user"}}, {{"role", "user"}}}}});
  ASSERT_FALSE(out.has_value());
  EXPECT_EQ(out.error().code(), StatusCode::kInvalid);
  EXPECT_EQ(out.error().message(), "Conversation roles must alternate user/assistant/user/assistant/...");
}

TEST(ChatTemplate, StrftimeNowUsesTheInjectedClockInUtc) {
  auto tmpl = ChatTemplate::parse("{{ strftime_now('%d %b %Y %H:%M') if strftime_now is defined else 'no clock' }}");
  ASSERT_TRUE(tmpl.has_value());
  EXPECT_EQ(*tmpl->render(nlohmann::json::object()), "no clock");
  RenderOptions options;
  options.now = std::chrono::system_clock::from_time_t(1721952000);  // 2024-07-26 00:00:00 UTC
  EXPECT_EQ(*tmpl->render(nlohmann::json::object(), options), "26 Jul 2024 00:00");
}

TEST(ChatTemplate, OrderedJsonKeepsKeyOrderAndJsonSortsIt) {
  auto tmpl = ChatTemplate::parse("{{ tool|tojson }}");
  ASSERT_TRUE(tmpl.has_value());
  const std::string text = R"({"tool": {"name": "f", "description": "d"}})";
  EXPECT_EQ(*tmpl->render(nlohmann::ordered_json::parse(text)), R"({"name": "f", "description": "d"})");
  EXPECT_EQ(*tmpl->render(nlohmann::json::parse(text)), R"({"description": "d", "name": "f"})");
}

TEST(ChatTemplate, ContextMustBeAnObject) {
  auto tmpl = ChatTemplate::parse("x");
  auto out = tmpl->render(nlohmann::json::array());
  ASSERT_FALSE(out.has_value());
  EXPECT_EQ(out.error().code(), StatusCode::kInvalid);
}

TEST(ChatTemplate, RenderIsRepeatableAndSharesNothingBetweenCalls) {
  auto tmpl = ChatTemplate::parse("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}");
  EXPECT_EQ(*tmpl->render(chat(true)), "2");
  EXPECT_EQ(*tmpl->render(chat(true)), "2");
}

// ---- limits: each hostile template fails cleanly instead of exhausting memory, stack or time ----

Result<std::string> render_with(std::string_view source, const RenderLimits& limits) {
  auto tmpl = ChatTemplate::parse(source);
  if (!tmpl) return std::unexpected(tmpl.error());
  RenderOptions options;
  options.limits = limits;
  return tmpl->render(nlohmann::json::object(), options);
}

void expect_fails_with(std::string_view source, std::string_view fragment, const RenderLimits& limits = {}) {
  auto out = render_with(source, limits);
  ASSERT_FALSE(out.has_value()) << source;
  EXPECT_NE(out.error().message().find(fragment), std::string::npos) << out.error().message();
}

TEST(ChatTemplateLimits, OutputSize) {
  RenderLimits limits;
  limits.max_output_bytes = 1000;
  expect_fails_with("{% for i in range(100) %}0123456789abcdef{% endfor %}", "output longer than the limit", limits);
  expect_fails_with("{{ 'x' * 5000 }}", "string longer than the limit", limits);
  expect_fails_with("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                    "string longer than the limit", limits);
  expect_fails_with("{{ 'ab'|replace('', 'xxxxxxxxxx' * 90) }}", "string longer than the limit", limits);
}

TEST(ChatTemplateLimits, LoopIterationsAndListSizes) {
  expect_fails_with("{% for i in range(1000) %}{% for j in range(1000) %}{% for k in range(1000) %}{% endfor %}{% endfor %}{% endfor %}",
                    "loop iterations");
  expect_fails_with("{{ range(999999999999)|length }}", "list longer than the limit");
  expect_fails_with("{{ [1] * 99999999999 }}", "list longer than the limit");
}

TEST(ChatTemplateLimits, WorkAndSteps) {
  RenderLimits limits;
  limits.max_work = 1'000'000;
  expect_fails_with("{% set s = 'x' * 100000 %}{% for i in range(1000) %}{% if 'y' in s %}{% endif %}{% endfor %}",
                    "units of work", limits);
  limits = RenderLimits{};
  limits.max_steps = 10'000;
  expect_fails_with("{% for i in range(100000) %}{{ i }}{% endfor %}", "evaluation steps", limits);
}

// "{{ " + inner + " }}", built by appending.
// NOTE: g++ 12 at -O3 reports `"literal" + std::string(n, c)` as a memcpy out of bounds
// (-Warray-bounds, a known false positive of its string inlining).
std::string in_braces(const std::string& inner) {
  std::string s = "{{ ";
  s += inner;
  s += " }}";
  return s;
}

TEST(ChatTemplateLimits, RecursionDepth) {
  expect_fails_with("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "calls nested deeper than");
  expect_fails_with(in_braces(std::string(5000, '(') + "1" + std::string(5000, ')')), "nested too deeply");
  expect_fails_with(in_braces(std::string(5000, '[') + std::string(5000, ']')), "nested too deeply");
  expect_fails_with(in_braces(std::string(100000, '-') + "1"), "nested too deeply");
  std::string chain = "{{ 1";
  for (int i = 0; i < 100000; ++i) chain += " + 1";
  expect_fails_with(chain + " }}", "nested too deeply");
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  expect_fails_with(ifs, "nested too deeply");
  expect_fails_with("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}{% endfor %}",
                    "nested too deeply");
  auto deep = nlohmann::json::parse(std::string(1000, '[') + std::string(1000, ']'));
  auto out = ChatTemplate::parse("x")->render(nlohmann::json{{"deep", deep}});
  ASSERT_FALSE(out.has_value());
  EXPECT_NE(out.error().message().find("nested too deeply"), std::string::npos);
}

}  // namespace
}  // namespace sluice::chat
