#include "model/model.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>

#include <gtest/gtest.h>

#include "model/model_maker.h"
#include "model/reference_forward.h"

namespace sluice {
namespace {

using gguf::TensorType;

std::unique_ptr<gguf::File> make_file(const ModelSpec& spec) {
  auto w = make_model(spec);
  SLUICE_CHECK(w.has_value()) << w.error().message();
  auto f = gguf::File::from_buffer(w->to_bytes(), spec.name);
  SLUICE_CHECK(f.has_value()) << f.error().message();
  return std::move(*f);
}

ModelSpec tiny(Arch arch, TensorType dtype) {
  ModelSpec s = *preset_spec("tiny");
  s.arch = arch;
  s.dtype = dtype;
  s.seed = 11;
  if (arch == Arch::kQwen3) s.head_dim = 32;  // head_dim != dim / heads, as in Qwen3
  if (arch == Arch::kQwen2) s.tied_embeddings = true;
  return s;
}

// Runs `tokens` of one sequence through the model in the given chunk sizes; returns the logits
// of every token, [num_tokens][vocab].
std::vector<std::vector<float>> run_chunked(Model& m, const std::vector<int32_t>& tokens,
                                            const std::vector<int>& chunks, const std::vector<int32_t>& blocks,
                                            ThreadPool& pool, KvType kv_type = KvType::kF32) {
  KvPool kv(m.config(), 16, 4, kv_type);
  std::vector<std::vector<float>> out;
  size_t pos = 0;
  for (size_t c = 0; pos < tokens.size(); ++c) {
    const int len = chunks[std::min(c, chunks.size() - 1)];
    ForwardBatch b;
    b.block_size = 4;
    b.max_blocks_per_seq = 8;
    const int32_t seq = b.add_sequence(blocks);
    for (int i = 0; i < len && pos < tokens.size(); ++i, ++pos) b.add_token(seq, tokens[pos], pos, true);
    std::vector<float> logits;
    Status s = m.forward(b, kv, pool, logits);
    EXPECT_TRUE(s) << s.message();
    const int32_t vocab = m.config().vocab_size;
    for (size_t i = 0; i < b.logits_idx.size(); ++i) out.emplace_back(logits.begin() + i * vocab, logits.begin() + (i + 1) * vocab);
  }
  return out;
}

struct Case {
  Arch arch;
  TensorType dtype;
  double tolerance;  // max |logit - reference| relative to the largest reference logit
  KvType kv_type = KvType::kF32;
};

class ModelForward : public ::testing::TestWithParam<Case> {};

// The weights the kernels read are exactly the reference's (dequantized) values. For the float
// types the only difference is float vs double accumulation (tolerance 1e-5 of the largest
// logit). Q8_0 also quantizes activations to 8 bits per block of 32, as ggml does, which costs
// about 1% per matmul and compounds over the layers (tolerance 5e-2).
TEST_P(ModelForward, MatchesNaiveReference) {
  const Case& c = GetParam();
  auto file = make_file(tiny(c.arch, c.dtype));
  std::vector<int32_t> tokens = {1, 17, 300, 42, 42, 511, 7, 99, 250, 3, 128};
  auto ref = testing::reference_logits(*file, tokens);
  auto model = Model::load(std::move(file));
  ASSERT_TRUE(model) << model.error().message();
  ThreadPool pool(2);
  auto got = run_chunked(**model, tokens, {static_cast<int>(tokens.size())}, {0, 1, 2}, pool, c.kv_type);
  ASSERT_EQ(got.size(), tokens.size());
  for (size_t t = 0; t < tokens.size(); ++t) {
    double scale = 0, err = 0;
    for (size_t i = 0; i < ref[t].size(); ++i) {
      scale = std::max(scale, std::abs(ref[t][i]));
      err = std::max(err, std::abs(ref[t][i] - got[t][i]));
    }
    EXPECT_LT(err, c.tolerance * scale) << "token " << t << " scale " << scale;
    // What greedy decoding picks is the reference's best token, or within the tolerance of it.
    auto ref_best = std::max_element(ref[t].begin(), ref[t].end()) - ref[t].begin();
    auto got_best = std::max_element(got[t].begin(), got[t].end()) - got[t].begin();
    if (c.dtype == TensorType::kQ8_0 || c.kv_type == KvType::kF16) {
      EXPECT_LT(ref[t][ref_best] - ref[t][got_best], 2 * c.tolerance * scale) << "token " << t;
    } else {
      EXPECT_EQ(ref_best, got_best) << "token " << t;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    ArchAndType, ModelForward,
    ::testing::Values(Case{Arch::kLlama, TensorType::kF32, 1e-5}, Case{Arch::kLlama, TensorType::kF16, 1e-5},
                      Case{Arch::kLlama, TensorType::kBF16, 1e-5}, Case{Arch::kLlama, TensorType::kQ8_0, 5e-2},
                      Case{Arch::kQwen2, TensorType::kF32, 1e-5}, Case{Arch::kQwen2, TensorType::kQ8_0, 5e-2},
                      Case{Arch::kQwen3, TensorType::kF32, 1e-5}, Case{Arch::kQwen3, TensorType::kBF16, 1e-5},
                      // An f16 KV cache rounds keys and values to 11 significant bits.
                      Case{Arch::kLlama, TensorType::kF32, 5e-3, KvType::kF16},
                      Case{Arch::kQwen3, TensorType::kF32, 5e-3, KvType::kF16}),
    [](const auto& info) {
      return std::string(arch_name(info.param.arch)) + "_" + std::string(gguf::tensor_type_name(info.param.dtype)) +
             (info.param.kv_type == KvType::kF16 ? "_kv_f16" : "");
    });

TEST(ModelForward, Llama3RopeScalingMatchesReference) {
  ModelSpec spec = tiny(Arch::kLlama, TensorType::kF32);
  spec.llama3_rope = true;
  spec.rope_theta = 500000.0f;
  auto file = make_file(spec);
  std::vector<int32_t> tokens = {5, 6, 7, 8, 9, 10, 11};
  auto ref = testing::reference_logits(*file, tokens);
  auto model = Model::load(std::move(file));
  ASSERT_TRUE(model);
  EXPECT_TRUE((*model)->config().has_rope_freq_factors);
  ThreadPool pool(1);
  auto got = run_chunked(**model, tokens, {7}, {0, 1}, pool);
  for (size_t i = 0; i < ref[6].size(); ++i) EXPECT_NEAR(got[6][i], ref[6][i], 1e-4);
}

class BatchInvariance : public ::testing::TestWithParam<std::tuple<TensorType, KvType>> {};

// DESIGN.md invariant 1: a token's logits are bit-identical however the prompt is chunked,
// whichever physical blocks hold its keys, how many threads run, and whatever else is in the batch.
TEST_P(BatchInvariance, LogitsAreBitIdenticalAcrossChunkingBlocksThreadsAndNeighbours) {
  const auto [dtype, kv_type] = GetParam();
  auto model = Model::load(make_file(tiny(Arch::kQwen2, dtype)));
  ASSERT_TRUE(model);
  Model& m = **model;
  std::vector<int32_t> tokens(23);
  std::iota(tokens.begin(), tokens.end(), 100);
  ThreadPool pool1(1), pool3(3);
  const auto alone = run_chunked(m, tokens, {23}, {0, 1, 2, 3, 4, 5}, pool1, kv_type);
  const std::vector<std::vector<int>> chunkings = {{1}, {3}, {5, 1, 7}, {16, 7}};
  for (const auto& chunks : chunkings) {
    for (ThreadPool* pool : {&pool1, &pool3}) {
      auto got = run_chunked(m, tokens, chunks, {9, 3, 12, 0, 7, 15}, *pool, kv_type);
      ASSERT_EQ(got.size(), alone.size());
      for (size_t t = 0; t < got.size(); ++t) {
        ASSERT_EQ(0, std::memcmp(got[t].data(), alone[t].data(), got[t].size() * sizeof(float)))
            << "token " << t << " with chunk " << chunks[0];
      }
    }
  }
  // Interleaved with two other sequences in every step.
  KvPool kv(m.config(), 32, 4, kv_type);
  ForwardBatch b;
  b.block_size = 4;
  b.max_blocks_per_seq = 8;
  const int32_t other1 = b.add_sequence({20, 21, 22, 23, 24, 25});
  const int32_t mine = b.add_sequence({10, 11, 12, 13, 14, 15});
  const int32_t other2 = b.add_sequence({26, 27, 28, 29, 30, 31});
  for (int32_t p = 0; p < 23; ++p) {
    b.add_token(other1, 7 + p, p, p % 2 == 0);
    b.add_token(mine, tokens[p], p, true);
    b.add_token(other2, 300 - p, p, true);
  }
  std::vector<float> logits;
  ASSERT_TRUE(m.forward(b, kv, pool3, logits));
  const int32_t vocab = m.config().vocab_size;
  int found = 0;
  for (size_t i = 0; i < b.logits_idx.size(); ++i) {
    const int32_t t = b.logits_idx[i];
    if (b.seq_idx[t] != mine) continue;
    ASSERT_EQ(0, std::memcmp(logits.data() + i * vocab, alone[b.positions[t]].data(), vocab * sizeof(float)))
        << "position " << b.positions[t];
    ++found;
  }
  EXPECT_EQ(found, 23);
}

INSTANTIATE_TEST_SUITE_P(Types, BatchInvariance,
                         ::testing::Combine(::testing::Values(TensorType::kF32, TensorType::kQ8_0),
                                            ::testing::Values(KvType::kF32, KvType::kF16)),
                         [](const auto& info) {
                           return std::string(gguf::tensor_type_name(std::get<0>(info.param))) + "_kv_" +
                                  std::string(kernels::kv_type_name(std::get<1>(info.param)));
                         });

TEST(ModelErrors, BadBatchIsRefusedNotComputed) {
  auto model = Model::load(make_file(tiny(Arch::kLlama, TensorType::kF32)));
  ASSERT_TRUE(model);
  KvPool kv((*model)->config(), 4, 4);
  ThreadPool pool(1);
  std::vector<float> logits;
  ForwardBatch b;
  b.block_size = 4;
  b.max_blocks_per_seq = 4;
  int32_t s = b.add_sequence({0});
  b.add_token(s, 512, 0, true);  // vocab is 512
  Status st = (*model)->forward(b, kv, pool, logits);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("token id 512 is outside the vocabulary"), std::string::npos) << st.message();
  ForwardBatch b2;
  b2.block_size = 4;
  b2.max_blocks_per_seq = 4;
  s = b2.add_sequence({0, 9});  // block 9 is not in a 4-block pool
  b2.add_token(s, 1, 5, true);
  st = (*model)->forward(b2, kv, pool, logits);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("KV slot"), std::string::npos) << st.message();
}

TEST(ModelErrors, UnsupportedArchitectureAndTensorTypeAreNamed) {
  gguf::Writer w;
  w.set_string("general.architecture", "mamba");
  auto f = gguf::File::from_buffer(w.to_bytes(), "m");
  ASSERT_TRUE(f);
  auto m = Model::load(std::move(*f));
  ASSERT_FALSE(m);
  EXPECT_NE(m.error().message().find("unsupported architecture 'mamba'"), std::string::npos);

  auto good = make_model(tiny(Arch::kLlama, TensorType::kF32));
  ASSERT_TRUE(good);
  good->add_tensor("dummy", TensorType::kQ4_K, {256}, std::vector<uint8_t>(144));
  auto bytes = good->to_bytes();
  auto f2 = gguf::File::from_buffer(bytes, "m2");
  ASSERT_TRUE(f2);
  // Rebuild the file with blk.0.attn_q.weight stored as Q8_1, a type the kernels do not compute.
  gguf::Writer w2;
  for (const auto& [k, v] : (*f2)->metadata()) w2.set(std::string(k), gguf::to_owned(v));
  for (const auto& t : (*f2)->tensors()) {
    if (t.name == "dummy") continue;
    if (t.name == "blk.0.attn_q.weight") {
      w2.add_tensor(std::string(t.name), TensorType::kQ8_1, {64, 64}, std::vector<uint8_t>(64 * 2 * 36));
    } else {
      w2.add_tensor(std::string(t.name), t.type, t.dims, std::span<const uint8_t>(t.data, t.num_bytes));
    }
  }
  auto f3 = gguf::File::from_buffer(w2.to_bytes(), "m3");
  ASSERT_TRUE(f3);
  auto m3 = Model::load(std::move(*f3));
  ASSERT_FALSE(m3);
  EXPECT_NE(m3.error().message().find("tensor 'blk.0.attn_q.weight' has type Q8_1, which sluice does not compute"),
            std::string::npos)
      << m3.error().message();
}

// A tensor the model would not use is refused: the file's metadata does not describe its weights
// (a block_count below its layers ran a shorter model without a word; an unknown tensor was
// ignored).
TEST(ModelErrors, TensorsTheModelWouldNotUseAreRefused) {
  // The tiny llama model, changed by `edit`, loaded: the error ("" if it loads).
  auto load_error = [](auto&& edit) {
    auto w = make_model(tiny(Arch::kLlama, TensorType::kF32));
    edit(*w);
    auto m = Model::load(std::move(*gguf::File::from_buffer(w->to_bytes(), "edited")));
    return m ? std::string() : m.error().message();
  };
  const std::string extra = load_error(
      [](gguf::Writer& w) { w.add_tensor("blk.0.foo.weight", TensorType::kF32, {4}, std::vector<uint8_t>(16)); });
  EXPECT_NE(extra.find("tensor 'blk.0.foo.weight' is not one sluice computes for a llama model"), std::string::npos)
      << extra;
  const std::string fewer = load_error([](gguf::Writer& w) { w.set_u32("llama.block_count", 1); });
  EXPECT_NE(fewer.find("the file holds weights of more layers than llama.block_count says (1): 'blk.1."),
            std::string::npos)
      << fewer;
  EXPECT_EQ(load_error([](gguf::Writer&) {}), "");
}

// The memory budget decides which forms ModelWeights::repack keeps: all when they fit, the
// lean form alone when only it fits (the tile kernels then decode at run time), none when
// neither fits; the note says which. Tied embeddings share one repacked copy.
TEST(ModelRepack, BudgetDecidesTheForms) {
  auto file = make_file(tiny(Arch::kQwen2, TensorType::kQ4_0));
  auto config = ModelConfig::from_gguf(*file);
  ASSERT_TRUE(config) << config.error().message();
  ThreadPool pool(2);
  auto bind = [&] {
    auto w = ModelWeights::bind(*file, *config);
    EXPECT_TRUE(w) << w.error().message();
    return std::move(*w);
  };
  ModelWeights all = bind();
  all.repack(pool, SIZE_MAX);
  ASSERT_FALSE(all.packed.empty());
  EXPECT_TRUE(all.repack_note.empty()) << all.repack_note;
  EXPECT_EQ(all.token_embd.packed, all.output.packed);  // tied: one copy
  for (const auto& p : all.packed) EXPECT_TRUE(p->tiles() && p->lean());

  ModelWeights lean = bind();
  lean.repack(pool, all.packed_bytes() - 1);
  ASSERT_EQ(lean.packed.size(), all.packed.size());
  for (const auto& p : lean.packed) EXPECT_TRUE(!p->tiles() && p->lean());
  EXPECT_LT(lean.packed_bytes(), all.packed_bytes());
  EXPECT_NE(lean.repack_note.find("the tile form"), std::string::npos) << lean.repack_note;

  ModelWeights none = bind();
  none.repack(pool, 0);
  EXPECT_TRUE(none.packed.empty());
  EXPECT_EQ(none.output.packed, nullptr);
  EXPECT_NE(none.repack_note.find("weights not repacked: the copies"), std::string::npos) << none.repack_note;

  // A path that keeps no tile form (avx512, avxvnni, avx2) names the lean form alone.
  ModelWeights none_lean = bind();
  none_lean.repack(pool, 0, /*tile_form=*/false);
  EXPECT_TRUE(none_lean.packed.empty());
  EXPECT_NE(none_lean.repack_note.find("weights not repacked: the lean form ("), std::string::npos)
      << none_lean.repack_note;
}

}  // namespace
}  // namespace sluice
