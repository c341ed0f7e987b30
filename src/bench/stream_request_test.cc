#include "bench/stream_request.h"

#include <gtest/gtest.h>

namespace sluice::bench {
namespace {

TEST(ParseStreamChunk, ReadsCompletionText) {
  auto c = parse_stream_chunk(R"({"choices":[{"index":0,"text":" hello","finish_reason":null}]})", Api::kCompletions);
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->text, " hello");
  EXPECT_EQ(c->finish_reason, "");
  EXPECT_FALSE(c->usage);
}

TEST(ParseStreamChunk, ReadsChatDeltasAndSkipsTheRoleChunk) {
  auto role = parse_stream_chunk(R"({"choices":[{"delta":{"role":"assistant","content":""}}]})", Api::kChat);
  ASSERT_TRUE(role);
  EXPECT_EQ(role->text, "");
  auto content = parse_stream_chunk(R"({"choices":[{"delta":{"content":"Hi"},"finish_reason":"length"}]})", Api::kChat);
  ASSERT_TRUE(content);
  EXPECT_EQ(content->text, "Hi");
  EXPECT_EQ(content->finish_reason, "length");
}

TEST(ParseStreamChunk, ReadsUsageWithAndWithoutCachedTokens) {
  auto with = parse_stream_chunk(
      R"({"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":8,"prompt_tokens_details":{"cached_tokens":64}}})",
      Api::kCompletions);
  ASSERT_TRUE(with && with->usage);
  EXPECT_EQ(with->usage->prompt_tokens, 100);
  EXPECT_EQ(with->usage->completion_tokens, 8);
  EXPECT_EQ(with->usage->cached_tokens, 64);
  auto without = parse_stream_chunk(R"({"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1}})", Api::kChat);
  ASSERT_TRUE(without && without->usage);
  EXPECT_EQ(without->usage->cached_tokens, -1);
  auto null_usage = parse_stream_chunk(R"({"choices":[{"text":"x"}],"usage":null})", Api::kCompletions);
  ASSERT_TRUE(null_usage);
  EXPECT_FALSE(null_usage->usage);
}

TEST(ParseStreamChunk, ReportsErrorsAndBadJson) {
  auto e = parse_stream_chunk(R"({"error":{"message":"out of blocks","type":"server_error"}})", Api::kCompletions);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->error, "out of blocks");
  EXPECT_FALSE(parse_stream_chunk("{not json", Api::kCompletions));
  EXPECT_FALSE(parse_stream_chunk("[1,2]", Api::kCompletions));
}

TEST(RequestBody, CompletionsWithTokenIdsAsksForAStreamWithUsage) {
  ApiSettings s;
  s.model = "m";
  s.extra_body = {{"temperature", 0.5}, {"top_k", 1}};
  RequestSpec spec;
  spec.prompt_token_ids = {5, 6, 7};
  spec.max_tokens = 16;
  const nlohmann::json b = request_body(s, spec);
  EXPECT_EQ(b["model"], "m");
  EXPECT_EQ(b["prompt"], nlohmann::json({5, 6, 7}));
  EXPECT_EQ(b["max_tokens"], 16);
  EXPECT_EQ(b["stream"], true);
  EXPECT_EQ(b["stream_options"]["include_usage"], true);
  EXPECT_EQ(b["ignore_eos"], true);
  EXPECT_EQ(b["temperature"], 0.5);  // --extra-body wins
  EXPECT_EQ(b["top_k"], 1);
  EXPECT_FALSE(b.contains("user"));
  EXPECT_FALSE(b.contains("messages"));
}

TEST(RequestBody, ChatSendsMessagesAndUserAndCanLeaveOutIgnoreEos) {
  ApiSettings s;
  s.api = Api::kChat;
  s.ignore_eos = false;
  RequestSpec spec;
  spec.messages = {{"user", "hi"}, {"assistant", "hello"}, {"user", "more"}};
  spec.user = "session-3";
  const nlohmann::json b = request_body(s, spec);
  ASSERT_EQ(b["messages"].size(), 3u);
  EXPECT_EQ(b["messages"][1]["role"], "assistant");
  EXPECT_EQ(b["messages"][1]["content"], "hello");
  EXPECT_EQ(b["user"], "session-3");
  EXPECT_FALSE(b.contains("ignore_eos"));
  EXPECT_FALSE(b.contains("prompt"));
}

TEST(RequestRecord, TimePerOutputTokenExcludesTheFirst) {
  RequestRecord r;
  r.ok = true;
  r.ttft_s = 0.1;
  r.e2e_s = 0.5;
  r.output_tokens = 5;
  EXPECT_DOUBLE_EQ(r.tpot_s(), 0.1);
  r.output_tokens = 1;
  EXPECT_EQ(r.tpot_s(), -1);
}

}  // namespace
}  // namespace sluice::bench
