#include "bench/workload.h"

#include <map>
#include <set>

#include <gtest/gtest.h>

namespace sluice::bench {
namespace {

std::vector<RequestSpec> take(Workload& w, int n) {
  std::vector<RequestSpec> specs;
  for (int i = 0; i < n; ++i) {
    auto s = w.next();
    if (!s) break;
    specs.push_back(std::move(*s));
  }
  return specs;
}

int count_words(const std::string& s) { return s.empty() ? 0 : static_cast<int>(std::count(s.begin(), s.end(), ' ')) + 1; }

TEST(LengthRange, ParsesAFixedLengthOrARange) {
  auto fixed = parse_length_range("128");
  ASSERT_TRUE(fixed);
  EXPECT_EQ(fixed->min, 128);
  EXPECT_EQ(fixed->max, 128);
  auto range = parse_length_range("64:256");
  ASSERT_TRUE(range);
  EXPECT_EQ(range->min, 64);
  EXPECT_EQ(range->max, 256);
  EXPECT_EQ(range->to_string(), "64:256");
  for (const char* bad : {"", "0", "-3", "10:5", "abc", "5:", "1:2:3", "2000000"}) {
    EXPECT_FALSE(parse_length_range(bad)) << bad;
  }
}

TEST(RandomWorkload, TokenPromptsHaveExactLengthsFromTheRange) {
  WorkloadConfig c;
  c.prompt_tokens = {32, 48};
  c.output_tokens = {10, 10};
  c.token_id_min = 200;
  c.token_id_max = 300;
  auto w = make_workload(c);
  EXPECT_FALSE(w->size());
  for (const RequestSpec& s : take(*w, 50)) {
    EXPECT_GE(s.prompt_token_ids.size(), 32u);
    EXPECT_LE(s.prompt_token_ids.size(), 48u);
    EXPECT_EQ(s.num_prompt_tokens, static_cast<int32_t>(s.prompt_token_ids.size()));
    EXPECT_EQ(s.max_tokens, 10);
    EXPECT_TRUE(s.prompt_text.empty());
    for (int32_t id : s.prompt_token_ids) {
      ASSERT_GE(id, 200);
      ASSERT_LT(id, 300);
    }
  }
  EXPECT_FALSE(w->exhausted());
}

TEST(RandomWorkload, SameSeedSameRequests) {
  WorkloadConfig c;
  c.prompt_format = PromptFormat::kText;
  c.prompt_tokens = {5, 20};
  auto a = take(*make_workload(c), 10);
  auto b = take(*make_workload(c), 10);
  c.seed = 1;
  auto d = take(*make_workload(c), 10);
  ASSERT_EQ(a.size(), 10u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].prompt_text, b[i].prompt_text);
    EXPECT_EQ(count_words(a[i].prompt_text), a[i].num_prompt_tokens);
  }
  EXPECT_NE(a[0].prompt_text, d[0].prompt_text);
}

TEST(SharedPrefixWorkload, EveryQuestionStartsWithItsPrefix) {
  // 3 prefixes x 4 questions = 12 requests; each starts with the 20 ids of its prefix, the
  // prefixes differ, and the order interleaves them (not 4 x prefix 0 first).
  WorkloadConfig c;
  c.kind = WorkloadKind::kSharedPrefix;
  c.num_prefixes = 3;
  c.num_questions = 4;
  c.prefix_tokens = 20;
  c.prompt_tokens = {5, 5};
  auto w = make_workload(c);
  ASSERT_EQ(w->size(), 12);
  auto specs = take(*w, 100);
  ASSERT_EQ(specs.size(), 12u);
  EXPECT_TRUE(w->exhausted());
  std::map<int32_t, std::vector<int32_t>> prefixes;
  std::map<int32_t, int> counts;
  std::set<std::vector<int32_t>> questions;
  for (const RequestSpec& s : specs) {
    ASSERT_EQ(s.prompt_token_ids.size(), 25u);
    EXPECT_EQ(s.num_prompt_tokens, 25);
    std::vector<int32_t> prefix(s.prompt_token_ids.begin(), s.prompt_token_ids.begin() + 20);
    auto [it, inserted] = prefixes.emplace(s.prefix_idx, prefix);
    EXPECT_EQ(it->second, prefix) << "prefix " << s.prefix_idx;
    ++counts[s.prefix_idx];
    questions.emplace(s.prompt_token_ids.begin() + 20, s.prompt_token_ids.end());
  }
  EXPECT_EQ(counts, (std::map<int32_t, int>{{0, 4}, {1, 4}, {2, 4}}));
  EXPECT_NE(prefixes[0], prefixes[1]);
  EXPECT_NE(prefixes[1], prefixes[2]);
  EXPECT_EQ(questions.size(), 12u);
  bool interleaved = false;
  for (size_t i = 1; i < 4; ++i) interleaved = interleaved || specs[i].prefix_idx != specs[0].prefix_idx;
  EXPECT_TRUE(interleaved);
}

TEST(SharedPrefixWorkload, ChatApiSendsThePrefixAsTheSystemMessage) {
  WorkloadConfig c;
  c.kind = WorkloadKind::kSharedPrefix;
  c.api = Api::kChat;
  c.prompt_format = PromptFormat::kText;
  c.num_prefixes = 2;
  c.num_questions = 3;
  c.prefix_tokens = 30;
  auto specs = take(*make_workload(c), 100);
  ASSERT_EQ(specs.size(), 6u);
  std::map<int32_t, std::string> systems;
  for (const RequestSpec& s : specs) {
    ASSERT_EQ(s.messages.size(), 2u);
    EXPECT_EQ(s.messages[0].role, "system");
    EXPECT_EQ(count_words(s.messages[0].content), 30);
    EXPECT_EQ(s.messages[1].role, "user");
    auto [it, inserted] = systems.emplace(s.prefix_idx, s.messages[0].content);
    EXPECT_EQ(it->second, s.messages[0].content);
  }
  EXPECT_EQ(systems.size(), 2u);
}

TEST(ChatWorkload, EachTurnResendsTheHistoryWithTheServersAnswers) {
  // 2 sessions x 3 turns. Session s's turn t is ready only when turn t-1 was answered; it carries
  //   user0, assistant0, ..., user(t-1), assistant(t-1), user(t)
  // and names its session in `user`.
  WorkloadConfig c;
  c.kind = WorkloadKind::kChat;
  c.api = Api::kChat;
  c.prompt_format = PromptFormat::kText;
  c.num_sessions = 2;
  c.num_turns = 3;
  c.prompt_tokens = {4, 4};
  auto w = make_workload(c);
  EXPECT_EQ(w->size(), 6);
  auto first = take(*w, 10);
  ASSERT_EQ(first.size(), 2u);  // only the first turns are ready
  EXPECT_FALSE(w->exhausted());
  EXPECT_EQ(first[0].user, "session-0");
  EXPECT_EQ(first[1].user, "session-1");

  const std::string answer0 = "answer zero", answer = "b";
  w->complete(first[0], &answer0);
  auto second = w->next();
  ASSERT_TRUE(second);
  EXPECT_EQ(second->session_idx, 0);
  EXPECT_EQ(second->turn_idx, 1);
  EXPECT_EQ(second->user, "session-0");
  ASSERT_EQ(second->messages.size(), 3u);
  EXPECT_EQ(second->messages[0].role, "user");
  EXPECT_EQ(second->messages[0].content, first[0].messages[0].content);
  EXPECT_EQ(second->messages[1].role, "assistant");
  EXPECT_EQ(second->messages[1].content, "answer zero");
  EXPECT_EQ(second->messages[2].role, "user");
  EXPECT_NE(second->messages[2].content, first[0].messages[0].content);
  EXPECT_EQ(second->num_prompt_tokens, 4 + 2 + 4);

  // A failed turn ends its session; the other session runs to its end.
  w->complete(*second, nullptr);
  w->complete(first[1], &answer);
  auto s1t1 = w->next();
  ASSERT_TRUE(s1t1);
  EXPECT_EQ(s1t1->session_idx, 1);
  EXPECT_FALSE(w->next());
  w->complete(*s1t1, &answer);
  auto s1t2 = w->next();
  ASSERT_TRUE(s1t2);
  EXPECT_EQ(s1t2->messages.size(), 5u);
  EXPECT_FALSE(w->exhausted());
  w->complete(*s1t2, &answer);
  EXPECT_FALSE(w->next());
  EXPECT_TRUE(w->exhausted());
}

TEST(WorkloadConfig, ValidationNamesTheFlags) {
  WorkloadConfig c;
  c.kind = WorkloadKind::kChat;
  EXPECT_NE(validate(c).message().find("--api chat"), std::string::npos);
  c.api = Api::kChat;
  EXPECT_NE(validate(c).message().find("--prompt-format text"), std::string::npos);
  c.prompt_format = PromptFormat::kText;
  EXPECT_TRUE(validate(c).is_ok());
  WorkloadConfig r;
  r.token_id_min = 10;
  r.token_id_max = 10;
  EXPECT_NE(validate(r).message().find("--token-range"), std::string::npos);
}

}  // namespace
}  // namespace sluice::bench
