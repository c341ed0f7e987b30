#include "model/model_maker.h"

#include <cmath>

#include <gtest/gtest.h>

#include "common/test_paths.h"
#include "model/loader.h"

namespace sluice {
namespace {

TEST(ModelMaker, SameSeedSameBytesOtherSeedOtherBytes) {
  ModelSpec a = *preset_spec("tiny");
  auto b1 = make_model(a)->to_bytes();
  auto b2 = make_model(a)->to_bytes();
  a.seed = 2;
  auto b3 = make_model(a)->to_bytes();
  EXPECT_EQ(b1, b2);
  EXPECT_NE(b1, b3);
}

TEST(ModelMaker, PresetsIncludeRealShapes) {
  auto qwen = preset_spec("qwen2.5-0.5b");
  ASSERT_TRUE(qwen);
  EXPECT_EQ(qwen->arch, Arch::kQwen2);
  EXPECT_EQ(qwen->num_layers, 24);
  EXPECT_EQ(qwen->dim, 896);
  EXPECT_EQ(qwen->num_heads, 14);
  EXPECT_EQ(qwen->num_kv_heads, 2);
  EXPECT_EQ(qwen->ffn_dim, 4864);
  EXPECT_EQ(qwen->vocab_size, 151936);
  EXPECT_TRUE(qwen->tied_embeddings);
  EXPECT_EQ(qwen->rope_theta, 1e6f);
  auto llama = preset_spec("llama-3.2-1b");
  ASSERT_TRUE(llama);
  EXPECT_EQ(llama->num_layers, 16);
  EXPECT_EQ(llama->dim, 2048);
  EXPECT_EQ(llama->vocab_size, 128256);
  auto bad = preset_spec("gpt-5");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("unknown preset 'gpt-5'"), std::string::npos);
}

TEST(ModelMaker, ImpossibleShapesAreClearErrors) {
  ModelSpec s = *preset_spec("tiny");
  s.num_kv_heads = 3;
  auto r = make_model(s);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("multiple of --kv-heads"), std::string::npos);
  s = *preset_spec("tiny");
  s.dim = 48;
  s.dtype = gguf::TensorType::kQ8_0;
  s.num_heads = 4;
  s.num_kv_heads = 2;
  r = make_model(s);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("multiple of 32"), std::string::npos);
  s = *preset_spec("tiny");
  s.rope_theta = std::nanf("");
  r = make_model(s);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("--rope-theta"), std::string::npos);
  s = *preset_spec("tiny");
  s.head_dim = 7;
  r = make_model(s);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("--head-dim must be even"), std::string::npos);
}

TEST(ModelMaker, MadeModelLoadsWithItsTokenizer) {
  ModelSpec s = *preset_spec("tiny");
  s.arch = Arch::kQwen3;
  auto f = gguf::File::from_buffer(make_model(s)->to_bytes(), "t");
  ASSERT_TRUE(f);
  auto tok = Tokenizer::from_gguf(**f);
  ASSERT_TRUE(tok) << tok.error().message();
  EXPECT_EQ((*tok)->vocab_size(), 512);
  auto ids = (*tok)->encode("hello world");
  ASSERT_TRUE(ids);
  EXPECT_EQ((*tok)->decode(*ids), "hello world");
}

TEST(ModelMaker, VocabFromAnotherFileIsCopied) {
  const std::string vocab = testing::shared_dir() + "/tokenizer/ggml-vocab-llama-spm.gguf";
  if (!gguf::File::open(vocab)) GTEST_SKIP() << "no " << vocab;
  ModelSpec s = *preset_spec("tiny");
  s.vocab_file = vocab;
  auto w = make_model(s);
  ASSERT_TRUE(w) << w.error().message();
  auto f = gguf::File::from_buffer(w->to_bytes(), "t");
  ASSERT_TRUE(f);
  EXPECT_EQ(*(*f)->get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ((*f)->find_tensor("token_embd.weight")->dims[1], 32000u);
}

TEST(ModelMaker, DemoModelSaysItIsRandom) {
  auto loaded = load_model(kDemoModelName);
  ASSERT_TRUE(loaded) << loaded.error().message();
  EXPECT_TRUE(loaded->is_demo);
  EXPECT_NE(loaded->model->config().name.find("gibberish"), std::string::npos);
}

}  // namespace
}  // namespace sluice
