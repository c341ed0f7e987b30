// The project's reference for "the output is right": the tiny real model stories260K
// (../shared/models) must tell its story, byte for byte, under greedy decoding.
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "common/test_paths.h"
#include "engine/engine.h"
#include "model/loader.h"
#include "model/reference_forward.h"

namespace sluice {
namespace {

const std::string kModel = testing::shared_dir() + "/models/stories260K.gguf";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Stories260K, GreedyTranscriptIsGolden) {
  if (!std::ifstream(kModel)) GTEST_SKIP() << "no " << kModel << " (the shared models folder is absent)";
  auto m = load_model(kModel);
  ASSERT_TRUE(m) << m.error().message();
  const std::string golden = read_file(testing::source_dir() + "/src/engine/testdata/stories260K_greedy.txt");
  ASSERT_FALSE(golden.empty());
  ThreadPool pool(2);
  // The golden transcript holds with either KV cache type.
  for (KvType kv_type : {KvType::kF32, KvType::kF16}) {
    auto engine = Engine::create(*m->model, *m->tokenizer, pool, EngineConfig{.kv_type = kv_type});
    ASSERT_TRUE(engine);
    Request req;
    req.prompt_tokens = *m->tokenizer->encode("Once upon a time");
    req.max_tokens = 200;  // clamped to the file's context of 128
    auto h = (*engine)->submit(req);
    ASSERT_TRUE(h) << h.error().message();
    StreamOutput r = h->wait();
    EXPECT_EQ(r.text, golden) << kernels::kv_type_name(kv_type);
    EXPECT_EQ(r.tokens.size(), 128u - req.prompt_tokens.size());
  }
}

// The greedy tokens are also what an independent double-precision forward pass picks.
TEST(Stories260K, GreedyTokensAgreeWithNaiveReference) {
  if (!std::ifstream(kModel)) GTEST_SKIP() << "no " << kModel << " (the shared models folder is absent)";
  auto m = load_model(kModel);
  ASSERT_TRUE(m);
  ThreadPool pool(1);
  auto engine = Engine::create(*m->model, *m->tokenizer, pool, EngineConfig{.kv_type = KvType::kF32});
  ASSERT_TRUE(engine);
  Request req;
  req.prompt_tokens = *m->tokenizer->encode("Once upon a time");
  req.max_tokens = 40;
  StreamOutput r = (*engine)->submit(req)->wait();
  ASSERT_EQ(r.tokens.size(), 40u);
  std::vector<int32_t> all = req.prompt_tokens;
  for (size_t i = 0; i + 1 < r.tokens.size(); ++i) all.push_back(r.tokens[i].token_id);
  auto ref = testing::reference_logits(m->model->file(), all);
  for (size_t i = 0; i < r.tokens.size(); ++i) {
    const auto& row = ref[req.prompt_tokens.size() - 1 + i];
    const auto best = std::max_element(row.begin(), row.end()) - row.begin();
    EXPECT_EQ(best, r.tokens[i].token_id) << "step " << i;
  }
}

}  // namespace
}  // namespace sluice
