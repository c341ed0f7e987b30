// Every quantized type against llama.cpp on the same files: SLUICE_SHARED_DIR/models/quant holds
// one random-weight model quantized by llama.cpp to each common mix, the next-token
// log-probabilities of the unquantized model at every position of 16 prompts (the truth), and
// llama.cpp's own on each quantized file (two builds). Its README sets the yardstick: at each
// position, the distance to the F32 model is the largest |logprob difference| over the F32
// model's top-20 tokens; over all 721 positions, sluice's median distance must be at most 1.25x
// the better llama.cpp build's + 0.02, and its top-1 token must be the F32 model's at no fewer
// positions than the better build's, less 1%.
//
// Two readings, both measured here (see the note of issue 13):
// - The files hold each candidate's top-20 only, and the README's table is what one gets from
//   them over the tokens both top-20s hold. sluice is scored on its own top-20 the same way, so
//   the two are compared alike; since that distance skips tokens a candidate ranks low, the test
//   also requires as many of the truth's top-20 in sluice's top-20 as in llama.cpp's.
// - The top-1 count moves by about 10 of 721 between correct implementations here (sluice's
//   Q6_K gave 575 to 592 as only float summation order and activation rounding changed; the
//   random network turns any rounding difference into a different near-tie winner somewhere),
//   more than the README's 1%. Below that margin the test asks McNemar's exact test whether
//   sluice is the less accurate of the two on the positions where exactly one is right, and
//   fails at p < 1%. A wrong layout (tried: two elements of each Q4_0 block swapped) fails both
//   checks by far (p ~ 1e-49; 3.9 of the top-20 held against 10.7).
//
// Everything here runs on one thread (a pool of 1 starts none), so this is a test of numbers
// only and ThreadSanitizer's run leaves it out (CMakeLists.txt): every type's kernels on pools of
// 1, 2 and 3 threads are kernels_test's, and the forward pass and the quantizer on a pool are
// model_test's and cli_test's, all under TSan.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/test_paths.h"
#include "gguf/gguf_writer.h"
#include "kernels/kernel_path.h"
#include "model/model.h"
#include "model/quantize_model.h"

namespace sluice {
namespace {

struct Position {
  std::vector<std::pair<int32_t, double>> top;  // the 20 most likely next tokens, best first
};
struct Prompt {
  std::vector<int32_t> tokens;
  std::vector<Position> positions;  // one per token
};

std::string quant_dir() { return testing::shared_dir() + "/models/quant/"; }

std::vector<Prompt> read_reference(const std::string& path) {
  std::ifstream in(path);
  std::vector<Prompt> out;
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    Prompt p;
    p.tokens = j.at("tokens").get<std::vector<int32_t>>();
    for (const auto& pos : j.at("top")) {
      Position q;
      for (const auto& e : pos) q.top.emplace_back(e.at(0).get<int32_t>(), e.at(1).get<double>());
      p.positions.push_back(std::move(q));
    }
    out.push_back(std::move(p));
  }
  return out;
}

// Log-softmax of every position of every prompt, each prompt in one forward pass.
std::vector<std::vector<std::vector<double>>> sluice_logprobs(Model& m, const std::vector<Prompt>& prompts) {
  ThreadPool pool(1);
  const int32_t block = 16, max_blocks = 8;
  KvPool kv(m.config(), max_blocks, block, KvType::kF16);
  std::vector<std::vector<std::vector<double>>> out;
  for (const Prompt& p : prompts) {
    ForwardBatch b;
    b.block_size = block;
    b.max_blocks_per_seq = max_blocks;
    const int32_t seq = b.add_sequence({0, 1, 2, 3, 4, 5, 6, 7});
    for (size_t i = 0; i < p.tokens.size(); ++i) b.add_token(seq, p.tokens[i], static_cast<int32_t>(i), true);
    std::vector<float> logits;
    const Status s = m.forward(b, kv, pool, logits);
    EXPECT_TRUE(s) << s.message();
    const int32_t vocab = m.config().vocab_size;
    auto& rows = out.emplace_back();
    for (size_t i = 0; i < p.tokens.size(); ++i) {
      const float* l = logits.data() + i * vocab;
      const double mx = *std::max_element(l, l + vocab);
      double sum = 0;
      for (int32_t v = 0; v < vocab; ++v) sum += std::exp(l[v] - mx);
      auto& row = rows.emplace_back(vocab);
      for (int32_t v = 0; v < vocab; ++v) row[v] = l[v] - mx - std::log(sum);
    }
  }
  return out;
}

struct Score {
  double median = 0;
  int top1 = 0;
  int positions = 0;
  double overlap = 0;  // mean count of the truth's top-20 tokens among the candidate's
};

// The candidate's 20 most likely tokens at every position, as the llama.cpp files hold them.
std::vector<Prompt> top20(const std::vector<Prompt>& truth, const std::vector<std::vector<std::vector<double>>>& lp) {
  std::vector<Prompt> out = truth;
  for (size_t p = 0; p < truth.size(); ++p) {
    for (size_t i = 0; i < truth[p].positions.size(); ++i) {
      const auto& row = lp[p][i];
      std::vector<int32_t> ids(row.size());
      for (size_t v = 0; v < ids.size(); ++v) ids[v] = static_cast<int32_t>(v);
      std::partial_sort(ids.begin(), ids.begin() + 20, ids.end(),
                        [&](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
      auto& top = out[p].positions[i].top;
      top.clear();
      for (int k = 0; k < 20; ++k) top.emplace_back(ids[k], row[ids[k]]);
    }
  }
  return out;
}

// The README's measure, computed as its table is from these files, which hold each candidate's
// top-20 only: at a position, the largest |logprob difference| over the truth's top-20 tokens
// that are also in the candidate's top-20 (0 if none is); the median over all positions; and
// the positions where the candidate's most likely token is the truth's. sluice is scored on its
// own top-20 by the same procedure, so the two are compared alike.
Score score(const std::vector<Prompt>& truth, const std::vector<Prompt>& candidate) {
  std::vector<double> dist;
  Score s;
  for (size_t p = 0; p < truth.size(); ++p) {
    for (size_t i = 0; i < truth[p].positions.size(); ++i) {
      const auto& mine = candidate[p].positions[i].top;
      double d = 0;
      for (const auto& [id, lp] : truth[p].positions[i].top) {
        for (const auto& [cid, clp] : mine) {
          if (cid != id) continue;
          d = std::max(d, std::abs(clp - lp));
          s.overlap += 1;
        }
      }
      dist.push_back(d);
      if (mine[0].first == truth[p].positions[i].top[0].first) ++s.top1;
    }
  }
  std::sort(dist.begin(), dist.end());
  s.positions = static_cast<int>(dist.size());
  s.overlap /= s.positions;
  s.median = dist.size() % 2 ? dist[dist.size() / 2] : (dist[dist.size() / 2 - 1] + dist[dist.size() / 2]) / 2;
  return s;
}

// Positions where exactly one of two candidates has the truth's top-1 token.
struct TopOnePairs {
  int only_mine = 0, only_theirs = 0;
};
TopOnePairs top1_pairs(const std::vector<Prompt>& truth, const std::vector<Prompt>& mine,
                       const std::vector<Prompt>& theirs) {
  TopOnePairs out;
  for (size_t p = 0; p < truth.size(); ++p) {
    for (size_t i = 0; i < truth[p].positions.size(); ++i) {
      const int32_t want = truth[p].positions[i].top[0].first;
      const bool a = mine[p].positions[i].top[0].first == want, b = theirs[p].positions[i].top[0].first == want;
      out.only_mine += a && !b;
      out.only_theirs += b && !a;
    }
  }
  return out;
}

// P(X >= k) for X ~ Binomial(n, 1/2).
double binomial_tail(int k, int n) {
  double p = 0;
  for (int i = k; i <= n; ++i) p += std::exp(std::lgamma(n + 1.0) - std::lgamma(i + 1.0) - std::lgamma(n - i + 1.0) - n * std::log(2.0));
  return std::min(1.0, p);
}

// Scores `model` on the prompts and checks it against the better llama.cpp build of `mix`.
void expect_as_accurate_as_llama(Model& model, const std::string& mix) {
  const auto truth = read_reference(quant_dir() + "llama-d256-s21-F32.reference.jsonl");
  ASSERT_EQ(truth.size(), 16u);
  const auto mine20 = top20(truth, sluice_logprobs(model, truth));
  const Score mine = score(truth, mine20);
  EXPECT_EQ(mine.positions, 721);
  if (mix == "F32") {
    // The same weights as the truth: only float summation order and the f16 KV cache differ.
    EXPECT_LT(mine.median, 0.01);
    EXPECT_GE(mine.top1, 715);
    return;
  }
  // The yardstick: the better of llama.cpp's two builds, the one whose top-1 token is the F32
  // model's more often (on Q4_0 and Q4_1 the AMX build's is rarely: its kernels are wrong there).
  Score best;
  best.top1 = -1;
  std::vector<Prompt> best_build;
  for (const char* build : {"llama-avx512", "llama-amx"}) {
    const std::string path = quant_dir() + "llama-d256-s21-" + mix + "." + build + ".jsonl";
    if (!std::ifstream(path)) continue;
    auto answers = read_reference(path);
    const Score s = score(truth, answers);
    if (s.top1 > best.top1 || (s.top1 == best.top1 && s.median < best.median)) {
      best = s;
      best_build = std::move(answers);
    }
  }
  ASSERT_GE(best.top1, 0) << "no llama.cpp reference for " << mix;
  const double best_median = best.median;
  const int best_top1 = best.top1;
  const TopOnePairs pairs = top1_pairs(truth, mine20, best_build);
  const double p = binomial_tail(pairs.only_theirs, pairs.only_theirs + pairs.only_mine);
  std::cout << mix << ": sluice median " << mine.median << ", top-1 " << mine.top1 << " of 721; llama.cpp "
            << best_median << ", " << best_top1 << "; top-1 right only for sluice " << pairs.only_mine
            << ", only for llama.cpp " << pairs.only_theirs << " (one-sided p " << p << "); overlap " << mine.overlap
            << " vs " << best.overlap << "\n";
  EXPECT_LE(mine.median, 1.25 * best_median + 0.02);
  // The distance counts only tokens both top-20s hold, so a candidate far off would also hold
  // few of them: it must hold as many as llama.cpp (they differ by 0.05 at most here).
  EXPECT_GE(mine.overlap, best.overlap - 0.25);
  // Top-1: the README's margin, or else no evidence that sluice is the less accurate (McNemar's
  // exact test on the positions where one of the two is right, one-sided, at 1%).
  if (mine.top1 < 0.99 * best_top1) {
    EXPECT_GE(p, 0.01) << "sluice's top-1 token is the F32 model's at " << mine.top1 << " positions, llama.cpp's at "
                       << best_top1;
  }
}


class QuantReference : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantReference, AsAccurateAsLlamaCpp) {
  auto file = gguf::File::open(quant_dir() + "llama-d256-s21-" + GetParam() + ".gguf");
  ASSERT_TRUE(file) << file.error().message();
  auto model = Model::load(std::move(*file));
  ASSERT_TRUE(model) << model.error().message();
  expect_as_accurate_as_llama(**model, GetParam());
}

// Weights repacked at load (kernels/packed_weight.h) give the logits of the same weights decoded
// at run time, bit for bit, on every position of 4 of the prompts (180 positions; the kernel tests
// cover every token count): a model loaded on the avx2 path without repacking against one loaded
// on each path (amx, avx512, avxvnni, avx2: those the machine runs), each run on its path.
class QuantRepack : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantRepack, RepackedWeightsGiveTheSameBits) {
  using kernels::KernelPath;
  const KernelPath before = kernels::active_kernel_path();
  if (!kernels::kernel_path_runs(KernelPath::kAvx2)) GTEST_SKIP() << "no AVX2 on this machine";
  std::vector<KernelPath> repacking;
  for (KernelPath p : {KernelPath::kAmx, KernelPath::kAvx512, KernelPath::kAvxVnni, KernelPath::kAvx2}) {
    if (kernels::kernel_path_runs(p)) repacking.push_back(p);
  }
  auto load = [&](KernelPath path, bool repack) {
    EXPECT_TRUE(kernels::set_kernel_path(path));
    auto file = gguf::File::open(quant_dir() + "llama-d256-s21-" + GetParam() + ".gguf");
    EXPECT_TRUE(file) << file.error().message();
    auto model = Model::load(std::move(*file), {.repack = repack});
    EXPECT_TRUE(model) << model.error().message();
    return std::move(*model);
  };
  auto prompts = read_reference(quant_dir() + "llama-d256-s21-F32.reference.jsonl");
  ASSERT_GE(prompts.size(), 4u);
  prompts.resize(4);
  auto as_loaded = load(KernelPath::kAvx2, false);
  ASSERT_TRUE(as_loaded->weights().packed.empty());
  const auto want = sluice_logprobs(*as_loaded, prompts);
  for (KernelPath path : repacking) {
    auto repacked = load(path, true);
    ASSERT_FALSE(repacked->weights().packed.empty()) << kernel_path_name(path);
    EXPECT_EQ(want, sluice_logprobs(*repacked, prompts)) << kernel_path_name(path);
  }
  ASSERT_TRUE(kernels::set_kernel_path(before));
}

INSTANTIATE_TEST_SUITE_P(Mixes, QuantReference,
                         ::testing::Values("F32", "Q8_0", "Q6_K", "Q5_K_M", "Q5_1", "Q5_0", "Q4_K_M", "Q4_K_S",
                                           "Q4_1", "Q4_0", "IQ4_XS", "IQ4_NL", "Q3_K_M", "Q2_K"));
INSTANTIATE_TEST_SUITE_P(Mixes, QuantRepack,
                         ::testing::Values("Q8_0", "Q6_K", "Q5_K_M", "Q5_1", "Q5_0", "Q4_K_M", "Q4_K_S", "Q4_1",
                                           "Q4_0", "IQ4_XS", "IQ4_NL", "Q3_K_M", "Q2_K"));


// ---- sluice's own quantizer (sluice model quantize) on the same F32 model ----

// The llama.cpp file of a mix, and sluice's quantization of the F32 model to it.
std::string llama_file(const std::string& mix) { return quant_dir() + "llama-d256-s21-" + mix + ".gguf"; }
std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

class SluiceQuantize : public ::testing::TestWithParam<std::string> {};

// The type of every tensor is the one llama.cpp's mix gave it.
TEST_P(SluiceQuantize, PlansTheTypesOfLlamaCppsMix) {
  auto f32 = gguf::File::open(llama_file("F32"));
  auto theirs = gguf::File::open(llama_file(GetParam()));
  ASSERT_TRUE(f32 && theirs);
  auto mix = find_quant_mix(lower(GetParam()));
  ASSERT_TRUE(mix) << mix.error().message();
  for (const auto& [name, type] : planned_types(**f32, **mix)) {
    const gguf::TensorInfo* t = (*theirs)->find_tensor(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(gguf::tensor_type_name(type), gguf::tensor_type_name(t->type)) << name;
  }
}

// Quantized by sluice, the model is at least as accurate as llama.cpp's file of the same mix;
// round-to-nearest tensors are llama.cpp's bytes exactly.
TEST_P(SluiceQuantize, AsAccurateAsLlamaCppsFile) {
  auto f32 = gguf::File::open(llama_file("F32"));
  auto theirs = gguf::File::open(llama_file(GetParam()));
  ASSERT_TRUE(f32 && theirs);
  auto mix = find_quant_mix(lower(GetParam()));
  ASSERT_TRUE(mix) << mix.error().message();
  const std::string out = ::testing::TempDir() + "sluice-" + GetParam() + ".gguf";
  ThreadPool pool(1);
  auto report = quantize_model(**f32, **mix, out, pool);
  ASSERT_TRUE(report) << report.error().message();
  EXPECT_TRUE(report->fallbacks.empty());
  auto ours = gguf::File::open(out);
  ASSERT_TRUE(ours) << ours.error().message();
  EXPECT_EQ((*ours)->get_string_or("general.architecture", ""), "llama");
  int identical = 0, rtn = 0;
  for (const auto& t : (*ours)->tensors()) {
    const gguf::TensorInfo* u = (*theirs)->find_tensor(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    ASSERT_EQ(t.type, u->type) << t.name;
    using T = gguf::TensorType;
    if (t.type == T::kQ8_0 || t.type == T::kQ4_0 || t.type == T::kQ4_1 || t.type == T::kQ5_0 || t.type == T::kQ5_1 ||
        t.type == T::kF32) {
      ++rtn;
      ASSERT_EQ(t.num_bytes, u->num_bytes);
      identical += std::memcmp(t.data, u->data, t.num_bytes) == 0;
      EXPECT_EQ(0, std::memcmp(t.data, u->data, t.num_bytes)) << t.name << " (" << gguf::tensor_type_name(t.type) << ")";
    }
  }
  std::cout << GetParam() << ": " << identical << " of " << rtn << " round-to-nearest tensors identical to llama.cpp's\n";
  auto model = Model::load(std::move(*ours));
  ASSERT_TRUE(model) << model.error().message();
  expect_as_accurate_as_llama(**model, GetParam());
  std::remove(out.c_str());
}

// A weight that is inf or NaN is refused with the tensor, row and column, not written into a
// model whose every logit would be NaN; so is a finite one too large for the type's float16
// scales (it would be written as inf).
TEST(SluiceQuantizeInput, NonFiniteWeightIsRefused) {
  auto f32 = gguf::File::open(llama_file("F32"));
  ASSERT_TRUE(f32) << f32.error().message();
  const gguf::TensorInfo* t = (*f32)->find_tensor("blk.1.ffn_up.weight");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->type, gguf::TensorType::kF32);
  std::ifstream in(llama_file("F32"), std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto mix = find_quant_mix("q4_0");
  ASSERT_TRUE(mix);
  ThreadPool pool(1);
  for (const float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
    std::vector<uint8_t> copy = bytes;
    const uint64_t at = (*f32)->data_offset() + t->offset + (3 * t->dims[0] + 7) * sizeof(float);  // row 3, column 7
    std::memcpy(copy.data() + at, &bad, sizeof bad);
    auto damaged = gguf::File::from_buffer(std::move(copy), "damaged.gguf");
    ASSERT_TRUE(damaged) << damaged.error().message();
    gguf::Writer w;
    auto report = quantize_into(**damaged, **mix, w, pool);
    ASSERT_FALSE(report);
    EXPECT_NE(report.error().message().find("tensor 'blk.1.ffn_up.weight' has a value that is not finite (row 3, column 7 is "),
              std::string::npos)
        << report.error().message();
  }
  for (const char* type : {"q4_0", "q8_0", "q4_k_m"}) {
    std::vector<uint8_t> copy = bytes;
    const float huge = 3e38f;
    const uint64_t at = (*f32)->data_offset() + t->offset + (5 * t->dims[0] + 2) * sizeof(float);  // row 5
    std::memcpy(copy.data() + at, &huge, sizeof huge);
    auto damaged = gguf::File::from_buffer(std::move(copy), "huge.gguf");
    ASSERT_TRUE(damaged) << damaged.error().message();
    gguf::Writer w;
    auto report = quantize_into(**damaged, **find_quant_mix(type), w, pool);
    ASSERT_FALSE(report) << type;
    EXPECT_NE(report.error().message().find("tensor 'blk.1.ffn_up.weight' row 5: its largest weight, 3e+38, is past "
                                            "what "),
              std::string::npos)
        << report.error().message();
  }
}

INSTANTIATE_TEST_SUITE_P(Mixes, SluiceQuantize,
                         ::testing::Values("Q8_0", "Q6_K", "Q5_K_M", "Q5_1", "Q5_0", "Q4_K_M", "Q4_K_S", "Q4_1",
                                           "Q4_0", "IQ4_XS", "Q3_K_M", "Q2_K"));

}  // namespace
}  // namespace sluice
