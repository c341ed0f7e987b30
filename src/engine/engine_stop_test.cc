// Where outputs end: stop strings, stop token ids, include_stop_str_in_output, min_tokens; and
// a model whose logits are NaN.
#include <cmath>
#include <cstring>

#include "engine/engine_test_util.h"

namespace sluice {
namespace {

using namespace engine_test;

// The stop string is not emitted, unless include_stop_str_in_output asks for it.
TEST(Engine, StopStringEndsTheOutputAndIsNotEmitted) {
  Fixture f;
  Request r = f.request("abc", 16);
  StreamOutput full = f.run(r);
  ASSERT_GE(full.text.size(), 4u);
  const std::string stop = full.text.substr(2, 2);
  r.stop_strings = {stop};
  StreamOutput cut = f.run(r);
  EXPECT_EQ(cut.finish_reason, FinishReason::kStop);
  EXPECT_EQ(cut.stop_matched, stop);
  EXPECT_EQ(cut.text, full.text.substr(0, full.text.find(stop)));
  r.include_stop_str_in_output = true;
  StreamOutput kept = f.run(r);
  EXPECT_EQ(kept.finish_reason, FinishReason::kStop);
  EXPECT_EQ(kept.text, full.text.substr(0, full.text.find(stop) + stop.size()));
}

TEST(Engine, StopTokenIdEndsTheOutput) {
  Fixture f;
  Request r = f.request("abc", 10);
  StreamOutput full = f.run(r);
  const int32_t stop_id = full.tokens[3].token_id;
  r.stop_token_ids = {stop_id};
  StreamOutput cut = f.run(r);
  EXPECT_EQ(cut.finish_reason, FinishReason::kStop);
  auto ids = token_ids(full);
  EXPECT_EQ(cut.tokens.size(), static_cast<size_t>(std::find(ids.begin(), ids.end(), stop_id) - ids.begin()) + 1);
}

// min_tokens: the stop token cannot come (probability 0) and stop strings are not matched
// until min_tokens tokens are out; after them both work as usual.
TEST(Engine, MinTokensHoldsOffStopTokensAndStopStrings) {
  Fixture f;
  Request r = f.request("abc", 24);
  const StreamOutput full = f.run(r);
  const int32_t first = full.tokens[0].token_id;
  r.stop_token_ids = {first};
  EXPECT_EQ(f.run(r).tokens.size(), 1u);  // without min_tokens: stops at once
  r.min_tokens = 6;
  r.logprobs = true;
  r.sampling.top_logprobs = 5;
  const StreamOutput held = f.run(r);
  ASSERT_GE(held.tokens.size(), 6u);
  for (size_t i = 0; i < held.tokens.size(); ++i) {
    const bool listed = std::any_of(held.tokens[i].top.begin(), held.tokens[i].top.end(),
                                    [&](const TokenLogprob& t) { return t.token_id == first; });
    if (i < 6) {
      EXPECT_NE(held.tokens[i].token_id, first) << i;
      EXPECT_FALSE(listed) << "token " << i << ": a suppressed token has probability 0";
    }
  }
  if (held.finish_reason == FinishReason::kStop) {
    EXPECT_EQ(held.tokens.back().token_id, first);
  }
  Request bad = r;
  bad.min_tokens = 25;
  auto refused = f.engine->submit(bad);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("min_tokens must be in [0, max_tokens = 24], got 25"), std::string::npos);

  // A stop string at the very start of the text is not matched within the first 3 tokens.
  Request s = f.request("abc", 24);
  s.stop_strings = {full.text.substr(0, 2)};
  ASSERT_EQ(f.run(s).text, "");
  s.min_tokens = 3;
  const StreamOutput late = f.run(s);
  const std::string first3 = f.m.tokenizer->decode(std::vector<int32_t>{full.tokens[0].token_id,
                                                                         full.tokens[1].token_id,
                                                                         full.tokens[2].token_id});
  EXPECT_TRUE(full.text.starts_with(late.text));
  EXPECT_GE(late.text.size(), first3.size()) << late.text;
}

// A model whose logits are NaN (a damaged weight) fails the request, saying so, rather than
// answer with whatever the uniform fallback picks.
TEST(Engine, NanLogitsFailTheRequest) {
  std::vector<uint8_t> bytes = make_model(*preset_spec("tiny"))->to_bytes();
  {
    auto f = gguf::File::from_buffer(bytes, "tiny");
    ASSERT_TRUE(f) << f.error().message();
    const gguf::TensorInfo* t = (*f)->find_tensor("output_norm.weight");
    ASSERT_NE(t, nullptr);
    const float nan = std::nanf("");
    std::memcpy(bytes.data() + (*f)->data_offset() + t->offset + 4 * sizeof(float), &nan, sizeof nan);
  }
  auto f = gguf::File::from_buffer(std::move(bytes), "damaged");
  ASSERT_TRUE(f) << f.error().message();
  auto tokenizer = Tokenizer::from_gguf(**f);
  ASSERT_TRUE(tokenizer) << tokenizer.error().message();
  auto model = Model::load(std::move(*f));
  ASSERT_TRUE(model) << model.error().message();
  ThreadPool pool(2);
  auto engine = Engine::create(**model, **tokenizer, pool, {});
  ASSERT_TRUE(engine) << engine.error().message();
  for (const float temperature : {0.0f, 0.8f}) {
    Request r;
    r.prompt_tokens = *(*tokenizer)->encode("abc");
    r.max_tokens = 4;
    r.sampling.temperature = temperature;
    StreamOutput out = (*engine)->submit(r)->wait();
    EXPECT_EQ(out.finish_reason, FinishReason::kError) << temperature;
    EXPECT_TRUE(out.tokens.empty()) << temperature;
    EXPECT_NE(out.error.find("the model computed NaN logits for output token 1"), std::string::npos) << out.error;
  }
  // Scoring the prompt alone (max_tokens 0) fails at its first position as well.
  Request scored;
  scored.prompt_tokens = *(*tokenizer)->encode("abc");
  scored.max_tokens = 0;
  scored.prompt_logprobs = true;
  StreamOutput out = (*engine)->submit(scored)->wait();
  EXPECT_EQ(out.finish_reason, FinishReason::kError);
  EXPECT_TRUE(out.prompt_logprobs.empty());
  EXPECT_NE(out.error.find("the model computed NaN logits scoring prompt token 2"), std::string::npos) << out.error;
  EXPECT_EQ((*engine)->wait_until_idle().kv_blocks_used, 0);
}

}  // namespace
}  // namespace sluice
