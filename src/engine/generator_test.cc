#include "engine/generator.h"

#include <gtest/gtest.h>

#include "model/loader.h"
#include "model/model_maker.h"

namespace sluice {
namespace {

LoadedModel tiny_model() {
  auto w = make_model(*preset_spec("tiny"));
  auto f = gguf::File::from_buffer(w->to_bytes(), "tiny");
  LoadedModel m;
  m.tokenizer = std::move(*Tokenizer::from_gguf(**f));
  m.model = std::move(*Model::load(std::move(*f)));
  return m;
}

TEST(Generator, GreedyIsDeterministicAndChunkingDoesNotMatter) {
  LoadedModel m = tiny_model();
  ThreadPool pool(2);
  GenerateRequest req;
  req.prompt_tokens = *m.tokenizer->encode("the quick brown fox jumps over the lazy dog");
  req.max_tokens = 12;
  req.ignore_eos = true;
  Generator whole(*m.model, *m.tokenizer, pool, 512);
  Generator chunked(*m.model, *m.tokenizer, pool, 3);
  auto a = whole.generate(req);
  auto b = chunked.generate(req);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->output_tokens.size(), 12u);
  EXPECT_EQ(a->output_tokens, b->output_tokens);
  EXPECT_EQ(a->text, b->text);
  EXPECT_EQ(a->finish_reason, FinishReason::kLength);
}

TEST(Generator, StreamedTextEqualsFinalTextAndDecode) {
  LoadedModel m = tiny_model();
  ThreadPool pool(1);
  GenerateRequest req;
  req.prompt_tokens = *m.tokenizer->encode("hello");
  req.max_tokens = 20;
  req.ignore_eos = true;
  req.sampling.temperature = 1.0f;
  req.sampling.seed = 5;
  Generator gen(*m.model, *m.tokenizer, pool);
  std::string streamed;
  auto r = gen.generate(req, [&](std::string_view t) { streamed += t; });
  ASSERT_TRUE(r);
  EXPECT_EQ(streamed, r->text);
  EXPECT_EQ(r->text, m.tokenizer->decode(r->output_tokens));
  // Same seed, same tokens.
  auto again = gen.generate(req);
  EXPECT_EQ(again->output_tokens, r->output_tokens);
}

TEST(Generator, StopStringEndsGenerationAndIsNotEmitted) {
  LoadedModel m = tiny_model();
  ThreadPool pool(1);
  GenerateRequest req;
  req.prompt_tokens = *m.tokenizer->encode("abc");
  req.max_tokens = 16;
  req.ignore_eos = true;
  Generator gen(*m.model, *m.tokenizer, pool);
  auto full = gen.generate(req);
  ASSERT_TRUE(full);
  ASSERT_GE(full->text.size(), 4u);
  // Stop on a piece of the text that greedy decoding is known to produce.
  const std::string stop = full->text.substr(2, 2);
  req.stop_strings = {stop};
  auto cut = gen.generate(req);
  ASSERT_TRUE(cut);
  EXPECT_EQ(cut->finish_reason, FinishReason::kStop);
  EXPECT_EQ(cut->stop_matched, stop);
  EXPECT_EQ(cut->text, full->text.substr(0, full->text.find(stop)));
}

TEST(Generator, StopTokenIdEndsGeneration) {
  LoadedModel m = tiny_model();
  ThreadPool pool(1);
  GenerateRequest req;
  req.prompt_tokens = *m.tokenizer->encode("abc");
  req.max_tokens = 10;
  req.ignore_eos = true;
  Generator gen(*m.model, *m.tokenizer, pool);
  auto full = gen.generate(req);
  ASSERT_TRUE(full);
  req.stop_token_ids = {full->output_tokens[3]};
  auto cut = gen.generate(req);
  ASSERT_TRUE(cut);
  EXPECT_EQ(cut->finish_reason, FinishReason::kStop);
  auto first = std::find(full->output_tokens.begin(), full->output_tokens.end(), full->output_tokens[3]);
  EXPECT_EQ(cut->output_tokens.size(), static_cast<size_t>(first - full->output_tokens.begin()) + 1);
}

TEST(Generator, PromptOverTheContextIsAClearError) {
  LoadedModel m = tiny_model();
  ThreadPool pool(1);
  GenerateRequest req;
  req.prompt_tokens.assign(m.model->config().context_length, 5);
  Generator gen(*m.model, *m.tokenizer, pool);
  auto r = gen.generate(req);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("context"), std::string::npos);
  req.prompt_tokens.clear();
  EXPECT_FALSE(gen.generate(req));
  req.prompt_tokens = {1, 2};
  req.sampling.temperature = -1;
  auto bad = gen.generate(req);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("temperature"), std::string::npos);
}

TEST(Generator, MaxTokensIsClampedToTheContext) {
  LoadedModel m = tiny_model();
  ThreadPool pool(1);
  GenerateRequest req;
  req.prompt_tokens.assign(m.model->config().context_length - 3, 5);
  req.max_tokens = 100;
  req.ignore_eos = true;
  Generator gen(*m.model, *m.tokenizer, pool, 128);
  auto r = gen.generate(req);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->output_tokens.size(), 3u);
  EXPECT_EQ(r->finish_reason, FinishReason::kLength);
}

}  // namespace
}  // namespace sluice
