// Prompt logprobs (Request::prompt_logprobs): every prompt token after the first scored by the
// model, the numbers generation reports for the same tokens, whatever the chunking, the cache,
// preemption or coalescing.
#include <cstring>
#include <latch>

#include <gtest/gtest.h>

#include "engine/engine_test_util.h"

namespace sluice {
namespace {

using engine_test::Fixture;

// Bit-identical logprob and alternatives.
void expect_same_score(const TokenOutput& a, const TokenOutput& b, const std::string& what) {
  EXPECT_EQ(a.token_id, b.token_id) << what;
  EXPECT_EQ(std::memcmp(&a.logprob, &b.logprob, sizeof(float)), 0) << what << ": " << a.logprob << " vs " << b.logprob;
  ASSERT_EQ(a.top.size(), b.top.size()) << what;
  for (size_t j = 0; j < a.top.size(); ++j) {
    EXPECT_EQ(a.top[j].token_id, b.top[j].token_id) << what << " alternative " << j;
    EXPECT_EQ(std::memcmp(&a.top[j].logprob, &b.top[j].logprob, sizeof(float)), 0) << what << " alternative " << j;
  }
}

Request scoring(const std::vector<int32_t>& tokens, int32_t top) {
  Request r;
  r.prompt_tokens = tokens;
  r.max_tokens = 0;
  r.prompt_logprobs = true;
  r.sampling.top_logprobs = top;
  return r;
}

TEST(EnginePromptLogprobs, ScoresEqualWhatGenerationReportedForTheSameTokens) {
  Fixture f;
  Request gen = f.request("Once upon a time there was", 24);
  gen.logprobs = true;
  gen.sampling.top_logprobs = 3;
  const StreamOutput g = f.run(gen);
  ASSERT_EQ(g.tokens.size(), 24u);
  ASSERT_TRUE(g.prompt_logprobs.empty()) << "not asked for";

  std::vector<int32_t> all = gen.prompt_tokens;
  for (const TokenOutput& t : g.tokens) all.push_back(t.token_id);
  const StreamOutput s = f.run(scoring(all, 3));
  EXPECT_TRUE(s.tokens.empty());
  EXPECT_EQ(s.finish_reason, FinishReason::kLength);
  EXPECT_EQ(s.metrics.num_output_tokens, 0);
  ASSERT_EQ(s.prompt_logprobs.size(), all.size() - 1);
  for (size_t i = 1; i < all.size(); ++i) EXPECT_EQ(s.prompt_logprobs[i - 1].token_id, all[i]) << i;
  const size_t first_generated = gen.prompt_tokens.size() - 1;
  for (size_t i = 0; i < g.tokens.size(); ++i) {
    expect_same_score(s.prompt_logprobs[first_generated + i], g.tokens[i], "generated token " + std::to_string(i));
  }
  for (const TokenOutput& t : s.prompt_logprobs) {
    EXPECT_LE(t.logprob, 0.0f);
    ASSERT_EQ(t.top.size(), 3u);
    EXPECT_GE(t.top[0].logprob, t.logprob);  // the best alternative is at least as likely
  }
}

// Scoring alone may fill the context (and the KV cache) to the last token; generating needs a
// place for its first new token.
TEST(EnginePromptLogprobs, APromptThatFillsTheContextIsScored) {
  EngineConfig config{.max_batch_tokens = 64, .block_size = 4};
  Fixture probe(config);
  const int32_t context = probe.m.model->config().context_length;
  config.kv_cache_bytes = (context / 4) * probe.block_bytes(config);  // the context's tokens exactly
  Fixture f(config);
  std::vector<int32_t> prompt;
  for (int32_t t = 0; t < context; ++t) prompt.push_back(1 + (t * 7) % 250);
  const StreamOutput s = f.run(scoring(prompt, 1));
  EXPECT_EQ(s.finish_reason, FinishReason::kLength);
  ASSERT_EQ(s.prompt_logprobs.size(), static_cast<size_t>(context - 1));
  for (int32_t i = 1; i < context; ++i) EXPECT_EQ(s.prompt_logprobs[i - 1].token_id, prompt[i]) << i;
  Request generate = scoring(prompt, 1);
  generate.max_tokens = 1;
  auto refused = f.engine->submit(generate);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("must be shorter than the model's context"), std::string::npos)
      << refused.error().message();
  prompt.push_back(1);
  auto over = f.engine->submit(scoring(prompt, 1));
  ASSERT_FALSE(over);
  EXPECT_NE(over.error().message().find("must be at most the model's context"), std::string::npos) << over.error().message();
}

TEST(EnginePromptLogprobs, ChunkingTheCacheAndCoalescingChangeNothing) {
  Fixture whole(EngineConfig{.max_batch_tokens = 512});
  Fixture chunked(EngineConfig{.max_num_seqs = 4, .max_batch_tokens = 7, .block_size = 4});
  std::vector<int32_t> prompt = *whole.m.tokenizer->encode("a b c d e f g h i j k l m n o p q r s t u v w x y z");
  ASSERT_GT(prompt.size(), 20u);
  const StreamOutput ref = whole.run(scoring(prompt, 2));
  ASSERT_EQ(ref.prompt_logprobs.size(), prompt.size() - 1);

  // In chunks of 7 tokens; then again with every block of the prompt in the prefix cache
  // (a scored prompt is computed in full all the same).
  for (int pass = 0; pass < 2; ++pass) {
    const StreamOutput s = chunked.run(scoring(prompt, 2));
    ASSERT_EQ(s.prompt_logprobs.size(), ref.prompt_logprobs.size()) << "pass " << pass;
    for (size_t i = 0; i < s.prompt_logprobs.size(); ++i) {
      expect_same_score(s.prompt_logprobs[i], ref.prompt_logprobs[i], "pass " + std::to_string(pass) + " token " + std::to_string(i));
    }
    EXPECT_EQ(s.metrics.cached_tokens, 0);
  }
  // A generating request behind the cached prompt still uses the cache.
  Request gen = chunked.request("a b c d e f g h i j k l m n o p q r s t u v w x y z", 4);
  EXPECT_GT(chunked.run(gen).metrics.cached_tokens, 0);

  // Two identical scoring requests share one computation, and both get every score.
  std::vector<RequestHandle> hs;
  for (int i = 0; i < 2; ++i) hs.push_back(std::move(*chunked.engine->submit(scoring(prompt, 2))));
  for (RequestHandle& h : hs) {
    const StreamOutput s = h.wait();
    ASSERT_EQ(s.prompt_logprobs.size(), ref.prompt_logprobs.size());
    for (size_t i = 0; i < s.prompt_logprobs.size(); ++i) {
      expect_same_score(s.prompt_logprobs[i], ref.prompt_logprobs[i], "coalesced token " + std::to_string(i));
    }
  }
}

TEST(EnginePromptLogprobs, PreemptedScoringRequestsPublishEachScoreOnce) {
  // 12 blocks of 4 tokens: four 30-token prompts scored and continued for 8 tokens each do not
  // fit together, so some are preempted mid-prompt and recompute it. All four go in while the
  // engine holds its first step (else a slow test thread could submit each after the last ended).
  EngineConfig config{.max_num_seqs = 4, .max_batch_tokens = 16, .block_size = 4, .coalesce = false};
  Fixture probe(config);
  config.kv_cache_bytes = 12 * probe.block_bytes(config);
  std::latch hold(1);
  engine_test::hold_first_step(config, hold);
  Fixture tight(config);
  Fixture roomy(EngineConfig{.block_size = 4});
  std::vector<Request> reqs;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> prompt;
    for (int t = 0; t < 30; ++t) prompt.push_back(1 + (t * 7 + i * 13) % 250);
    Request r = scoring(prompt, 1);
    r.max_tokens = 8;
    r.ignore_eos = true;
    reqs.push_back(r);
  }
  std::vector<RequestHandle> hs;
  for (const Request& r : reqs) hs.push_back(std::move(*tight.engine->submit(r)));
  hold.count_down();
  for (size_t i = 0; i < reqs.size(); ++i) {
    const StreamOutput s = hs[i].wait();
    const StreamOutput ref = roomy.run(reqs[i]);
    ASSERT_EQ(s.prompt_logprobs.size(), 29u) << i;
    for (size_t j = 0; j < s.prompt_logprobs.size(); ++j) {
      expect_same_score(s.prompt_logprobs[j], ref.prompt_logprobs[j], "request " + std::to_string(i) + " token " + std::to_string(j));
    }
    EXPECT_EQ(engine_test::token_ids(s), engine_test::token_ids(ref)) << i;
  }
  EXPECT_GT(tight.engine->metrics().num_preemptions, 0);
}

TEST(EnginePromptLogprobs, AOneTokenPromptHasNothingToScore) {
  Fixture f;
  const StreamOutput s = f.run(scoring({5}, 0));
  EXPECT_TRUE(s.prompt_logprobs.empty());
  EXPECT_EQ(s.finish_reason, FinishReason::kLength);
}

}  // namespace
}  // namespace sluice
