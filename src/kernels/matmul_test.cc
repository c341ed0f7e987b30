#include "kernels/matmul.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <vector>

#include "common/half.h"
#include "kernels/decoded_chunk.h"
#include "kernels/kernel_path.h"
#include "kernels/matmul_lean.h"
#include "kernels/matmul_test_util.h"
#include "kernels/matmul_vnni.h"
#include "kernels/packed_weight.h"
#include "kernels/quant_blocks.h"

namespace sluice::kernels {
namespace {

using gguf::TensorType;
using namespace testing;

class MatmulTest : public ::testing::TestWithParam<TensorType> {};

// Checks y [tokens, rows] against a double-precision product, within float rounding plus, for
// Q8_0, the bound of the activations' quantization.
void expect_near_reference(const TestWeight& w, const std::vector<float>& x, int64_t tokens,
                           const std::vector<float>& y) {
  const int64_t rows = w.view.rows, cols = w.view.cols;
  const bool q8 = is_block_quant(w.view.type);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t n = 0; n < rows; ++n) {
      double ref = 0, mag = 0, quant_bound = 0;
      for (int64_t k = 0; k < cols; ++k) {
        ref += double{w.values[n * cols + k]} * x[t * cols + k];
        mag += std::abs(double{w.values[n * cols + k]} * x[t * cols + k]);
        if (q8) {
          // Q8_0 quantizes activations per block of 32: each is off by at most half a step.
          const int64_t b0 = t * cols + k / 32 * 32;
          double amax = 0;
          for (int j = 0; j < 32; ++j) amax = std::max(amax, double{std::abs(x[b0 + j])});
          quant_bound += std::abs(double{w.values[n * cols + k]}) * amax / 127 / 2;
        }
      }
      ASSERT_NEAR(y[t * rows + n], ref, 1e-5 * mag + quant_bound + 1e-6) << "t=" << t << " n=" << n;
      // The bound is not vacuous: it is a small fraction of the products' magnitude.
      if (q8) {
        ASSERT_LT(quant_bound, 0.02 * mag);
      }
    }
  }
}

TEST_P(MatmulTest, MatchesDoubleReference) {
  ThreadPool pool(2);
  // (rows, cols, tokens): one token takes a path of its own; rows not a multiple of the row
  // groups end in partial groups.
  const struct { int64_t rows, cols, tokens; } shapes[] = {
      {37, 3 * short_cols(GetParam()), 5}, {37, 3 * short_cols(GetParam()), 1}, {21, test_cols(GetParam()), 1},
      {21, test_cols(GetParam()), 11}, {5, short_cols(GetParam()), 3}};
  uint32_t seed = 1;
  for (const auto& s : shapes) {
    SCOPED_TRACE(::testing::Message() << s.rows << "x" << s.cols << ", " << s.tokens << " tokens");
    TestWeight w = make_weight(GetParam(), s.rows, s.cols, seed++);
    auto x = random_x(s.tokens * s.cols, seed++);
    std::vector<float> y(s.tokens * s.rows);
    matmul(pool, w.view, x.data(), s.tokens, y.data());
    expect_near_reference(w, x, s.tokens, y);
  }
}

// Every token of every batch of 1..40 tokens, at a position that changes with the batch, on 1
// and 3 threads, must reproduce the result it has alone, bit for bit.
void expect_batch_invariant(const TestWeight& w, const std::vector<float>& x, int64_t num_distinct) {
  const int64_t rows = w.view.rows, cols = w.view.cols;
  ThreadPool pool1(1), pool3(3);
  std::vector<std::vector<float>> alone(num_distinct, std::vector<float>(rows));
  for (int64_t i = 0; i < num_distinct; ++i) matmul(pool1, w.view, x.data() + i * cols, 1, alone[i].data());
  for (int64_t n_tokens = 1; n_tokens < num_distinct; ++n_tokens) {
    // Token i of the batch is distinct token (7 i + n_tokens) mod num_distinct (a prime).
    std::vector<int64_t> ids(n_tokens);
    std::vector<float> batch(n_tokens * cols);
    for (int64_t i = 0; i < n_tokens; ++i) {
      ids[i] = (7 * i + n_tokens) % num_distinct;
      std::memcpy(&batch[i * cols], &x[ids[i] * cols], cols * sizeof(float));
    }
    for (ThreadPool* pool : {&pool1, &pool3}) {
      std::vector<float> y(n_tokens * rows);
      matmul(*pool, w.view, batch.data(), n_tokens, y.data());
      for (int64_t i = 0; i < n_tokens; ++i) {
        ASSERT_EQ(0, std::memcmp(y.data() + i * rows, alone[ids[i]].data(), rows * sizeof(float)))
            << "token " << ids[i] << " at position " << i << " in a batch of " << n_tokens << " on "
            << pool->num_threads() << " threads";
      }
    }
  }
}

TEST_P(MatmulTest, TokenResultIsBitIdenticalWhateverTheBatch) {
  // 70 rows: full groups of 4 and 8 rows, then a partial group.
  const int64_t rows = 70, cols = test_cols(GetParam()), num_distinct = 41;
  TestWeight w = make_weight(GetParam(), rows, cols, 3);
  expect_batch_invariant(w, random_x(num_distinct * cols, 4), num_distinct);
}

// The same on every SIMD target compiled in and supported here (SSE4 and the scalar fallback
// take other code paths than AVX2).
TEST_P(MatmulTest, BatchInvariantOnEveryTarget) {
  const int64_t rows = 13, cols = test_cols(GetParam()), num_distinct = 41;
  TestWeight w = make_weight(GetParam(), rows, cols, 5);
  const auto x = random_x(num_distinct * cols, 6);
  const KernelPath path = active_kernel_path();
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    SCOPED_TRACE(hwy::TargetName(target));
    hwy::SetSupportedTargetsForTest(target);
    // The instruction paths exist only beside the AVX2 code (their float steps are FMAs, as
    // AVX2's are); a Highway target below AVX2 is the generic path, which never meets them.
    if (!(target & (HWY_AVX2 | HWY_AVX3)) && path != KernelPath::kAvx2 && path != KernelPath::kGeneric) {
      ASSERT_TRUE(set_kernel_path(KernelPath::kAvx2));
    }
    expect_batch_invariant(w, x, num_distinct);
    std::vector<float> y(3 * rows);
    ThreadPool pool(2);
    matmul(pool, w.view, x.data(), 3, y.data());
    expect_near_reference(w, x, 3, y);
    ASSERT_TRUE(set_kernel_path(path));
  }
  hwy::SetSupportedTargetsForTest(0);
}

// Every kernel path this machine runs gives the same bits as the avx2 path on the weight as
// loaded (the Highway code on the file's blocks), for every token count 1..40 (below and above
// the AMX path's threshold and tile of 16) and 64, 65 (many tiles of every kernel, and one token
// over) on 1 and 3 threads, with the weight as loaded and repacked (packed_weight.h: 37 rows end
// in a partial group of 16, 5 rows: the first 8-row part of the avx2 parts form only). 13 and 29
// rows, at a few counts, end in a group whose second part is partial. Paths the machine cannot
// run are named, not tested.
void expect_every_path_same_bits(gguf::TensorType type, int64_t rows, const std::vector<int64_t>& counts) {
  SCOPED_TRACE(fmt::format("{} rows", rows));
  const int64_t cols = test_cols(type);
  TestWeight w = make_weight(type, rows, cols, 8);
  const int64_t most = *std::max_element(counts.begin(), counts.end());
  const auto x = random_x(most * cols, 9);
  ASSERT_TRUE(set_kernel_path(KernelPath::kAvx2));
  ThreadPool pool1(1), pool3(3);
  std::vector<std::vector<float>> want;
  for (const int64_t n : counts) {
    want.emplace_back(n * rows);
    matmul(pool1, w.view, x.data(), n, want.back().data());
  }
  // The weight as loaded, repacked in both forms (the avx2, avxvnni and avx512 paths read the
  // lean form of either), and in the lean form only (the amx tile kernels then decode at run
  // time). RepackedFormsHoldWhatDecodingGives checks the forms' contents directly.
  std::unique_ptr<PackedWeight> packed, lean;
  WeightView packed_view = w.view, lean_view = w.view;
  if (PackedWeight::packs(w.view.type)) {
    packed = PackedWeight::pack(w.view, pool3);
    packed_view.packed = packed.get();
    lean = PackedWeight::pack(w.view, pool3, {.tiles = false, .lean = true});
    lean_view.packed = lean.get();
  }
  for (const KernelPath path : available_kernel_paths()) {
    if (path == KernelPath::kGeneric) continue;
    SCOPED_TRACE(kernel_path_name(path));
    ASSERT_TRUE(set_kernel_path(path));
    for (const WeightView& view : {w.view, packed_view, lean_view}) {
      SCOPED_TRACE(view.packed == nullptr ? "as loaded" : view.packed->tiles() ? "packed" : "lean form only");
      for (size_t i = 0; i < counts.size(); ++i) {
        const int64_t n = counts[i];
        for (ThreadPool* pool : {&pool1, &pool3}) {
          std::vector<float> y(n * rows);
          matmul(*pool, view, x.data(), n, y.data());
          ASSERT_EQ(0, std::memcmp(y.data(), want[i].data(), y.size() * sizeof(float))) << n << " tokens";
        }
      }
    }
  }
}

TEST_P(MatmulTest, EveryKernelPathGivesTheSameBits) {
  const KernelPath before = active_kernel_path();
  if (!set_kernel_path(KernelPath::kAvx2)) GTEST_SKIP() << "no AVX2 on this machine";
  for (const std::string& why : unavailable_kernel_paths()) std::cout << "not run: " << why << "\n";
  std::vector<int64_t> counts;
  for (int64_t n = 1; n <= 40; ++n) counts.push_back(n);
  counts.insert(counts.end(), {64, 65});
  expect_every_path_same_bits(GetParam(), 37, counts);
  expect_every_path_same_bits(GetParam(), 5, {1, 2, 3, 4, 5});
  expect_every_path_same_bits(GetParam(), 13, {1, 2, 3, 4, 5, 9});
  expect_every_path_same_bits(GetParam(), 29, {2, 3, 4, 7});
  ASSERT_TRUE(set_kernel_path(before));
}

// Activations of one sign quantize to +-127 everywhere, so each pair of products in the integer
// dot products is as large as the levels make it: a path whose pairs saturated (vpmaddubsw past
// 32767, as the wide levels of Q8_0 and IQ4 would stored unsigned) would give other bits than the
// weight as loaded on avx2, which is checked against the double-precision product too.
TEST_P(MatmulTest, ActivationsOfOneSignDoNotSaturate) {
  if (!is_block_quant(GetParam())) GTEST_SKIP() << "not an integer type";
  const KernelPath before = active_kernel_path();
  const int64_t rows = 37, cols = test_cols(GetParam()), tokens = 3;
  TestWeight w = make_weight(GetParam(), rows, cols, 31);
  std::vector<float> x(tokens * cols);
  for (int64_t k = 0; k < cols; ++k) {
    x[k] = 1.0f;                                  // all +127
    x[cols + k] = -1.0f;                          // all -127
    x[2 * cols + k] = k / 32 % 2 ? 0.5f : -0.5f;  // the sign a block apart
  }
  if (!set_kernel_path(KernelPath::kAvx2)) GTEST_SKIP() << "no AVX2 on this machine";
  ThreadPool pool(2);
  std::vector<float> want(tokens * rows);
  matmul(pool, w.view, x.data(), tokens, want.data());
  expect_near_reference(w, x, tokens, want);
  const auto lean = PackedWeight::pack(w.view, pool, {.tiles = false, .lean = true});
  WeightView lean_view = w.view;
  lean_view.packed = lean.get();
  for (const KernelPath path : available_kernel_paths()) {
    if (path == KernelPath::kGeneric) continue;
    SCOPED_TRACE(kernel_path_name(path));
    ASSERT_TRUE(set_kernel_path(path));
    for (const WeightView& view : {w.view, lean_view}) {
      SCOPED_TRACE(view.packed == nullptr ? "as loaded" : "lean form");
      for (const int64_t n : {int64_t{1}, tokens}) {
        std::vector<float> y(n * rows);
        matmul(pool, view, x.data(), n, y.data());
        ASSERT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * sizeof(float))) << n << " tokens";
      }
    }
  }
  ASSERT_TRUE(set_kernel_path(before));
}

// Several weights in one parallel loop give, bit for bit, what separate calls give: targets of
// 37, 8 and 70 rows (partial row groups at the seams between targets), on 1 and 3 threads, for
// 1, 3 and 16 tokens; and a call mixing this type with another (one loop per target).
TEST_P(MatmulTest, MultiTargetMatchesSeparateCalls) {
  const int64_t cols = test_cols(GetParam());
  const TensorType other = GetParam() == TensorType::kQ8_0 ? TensorType::kF16 : TensorType::kQ8_0;
  const TestWeight a = make_weight(GetParam(), 37, cols, 11), b = make_weight(GetParam(), 8, cols, 12),
                   c = make_weight(GetParam(), 70, cols, 13), mixed = make_weight(other, 21, cols, 14);
  for (int64_t tokens : {1, 3, 16}) {
    const auto x = random_x(tokens * cols, 15);
    for (int threads : {1, 3}) {
      SCOPED_TRACE(::testing::Message() << tokens << " tokens, " << threads << " threads");
      ThreadPool pool(threads);
      for (const std::vector<const TestWeight*>& set :
           {std::vector<const TestWeight*>{&a, &b, &c}, std::vector<const TestWeight*>{&a, &mixed, &c}}) {
        std::vector<std::vector<float>> separate, fused;
        std::vector<MatmulTarget> targets;
        for (const TestWeight* w : set) {
          separate.emplace_back(tokens * w->view.rows);
          fused.emplace_back(tokens * w->view.rows, -1.0f);
          matmul(pool, w->view, x.data(), tokens, separate.back().data());
        }
        for (size_t i = 0; i < set.size(); ++i) targets.push_back({set[i]->view, fused[i].data()});
        matmul_multi(pool, targets, x.data(), tokens);
        for (size_t i = 0; i < set.size(); ++i) {
          ASSERT_EQ(0, std::memcmp(separate[i].data(), fused[i].data(), separate[i].size() * sizeof(float)))
              << "target " << i;
        }
      }
    }
  }
}

// Embedding look-up: each element as the naive dequantizer computes it (in double; the kernels'
// float products (d * sc) * q + dmin * m may differ from it in the last bit).
TEST_P(MatmulTest, DequantizeRowMatchesValues) {
  const int64_t cols = 2 * short_cols(GetParam());
  TestWeight w = make_weight(GetParam(), 3, cols, 5);
  std::vector<float> row(cols);
  dequantize_row(w.view, 2, row.data());
  for (int64_t k = 0; k < cols; ++k) {
    EXPECT_NEAR(row[k], w.values[2 * cols + k], 1e-6 * std::abs(w.values[2 * cols + k]) + 1e-9) << k;
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MatmulTest, ::testing::ValuesIn(kMatmulTestTypes), type_name);

// Weights at the ends of the int8 range (including -128, which Q8_0 files may hold) times
// activations that quantize to +-127: the integer products must neither saturate nor wrap, on
// every path, from the file's blocks and from the lean form (stored as q + 128: up to 255).
TEST(MatmulQ8, FullInt8RangeIsExact) {
  const int64_t rows = 19, cols = 64, tokens = 9;
  TestWeight w = make_weight(TensorType::kQ8_0, rows, cols, 7);
  const int8_t extremes[] = {-128, 127, -127, -128};
  for (int64_t b = 0; b < rows * cols / 32; ++b) {
    auto* block = reinterpret_cast<gguf::BlockQ8_0*>(&w.bytes[b * sizeof(gguf::BlockQ8_0)]);
    for (int j = 0; j < 32; ++j) {
      block->qs[j] = extremes[(b + j) % 4];
      w.values[b * 32 + j] = f16_to_f32(block->d) * block->qs[j];
    }
  }
  std::vector<float> x(tokens * cols);
  for (int64_t i = 0; i < tokens * cols; ++i) x[i] = (i * 5 + i / 3) % 3 == 0 ? -1.0f : 1.0f;
  std::vector<float> y(tokens * rows);
  ThreadPool pool(2);
  const auto lean = PackedWeight::pack(w.view, pool, {.tiles = false, .lean = true});
  WeightView lean_view = w.view;
  lean_view.packed = lean.get();
  const KernelPath before = active_kernel_path();
  for (const KernelPath path : available_kernel_paths()) {
    SCOPED_TRACE(kernel_path_name(path));
    ASSERT_TRUE(set_kernel_path(path));
    for (const WeightView& view : {w.view, lean_view}) {
      SCOPED_TRACE(view.packed == nullptr ? "as loaded" : "lean form");
      for (const int64_t n : {int64_t{1}, int64_t{2}, tokens}) {
        matmul(pool, view, x.data(), n, y.data());
        for (int64_t t = 0; t < n; ++t) {
          for (int64_t r = 0; r < rows; ++r) {
            double ref = 0;  // x = +-1 quantizes exactly (scale 1/127, values +-127)
            for (int64_t k = 0; k < cols; ++k) ref += double{w.values[r * cols + k]} * x[t * cols + k];
            ASSERT_NEAR(y[t * rows + r], ref, 1e-5 * std::abs(ref) + 1e-4) << "t=" << t << " r=" << r;
          }
        }
      }
    }
  }
  ASSERT_TRUE(set_kernel_path(before));
}

// Naming a path: an unknown name and a path the machine cannot run are errors that say why.
TEST(KernelPath, UnknownOrUnavailablePathIsAnError) {
  auto bad = parse_kernel_path("avx9");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("unknown kernel path 'avx9' (choose avx2, avxvnni, avx512 or amx)"), std::string::npos);
  for (const std::string& why : unavailable_kernel_paths()) {
    const auto name = why.substr(0, why.find(':'));
    auto path = parse_kernel_path(name);
    ASSERT_TRUE(path) << why;
    const Status s = set_kernel_path(*path);
    ASSERT_FALSE(s) << why;
    EXPECT_NE(s.message().find(why), std::string::npos) << s.message();
  }
  EXPECT_NE(describe_kernel_paths().find(std::string("kernels: ") + kernel_path_name(active_kernel_path())),
            std::string::npos);
}

TEST(Matmul, SupportedTypes) {
  EXPECT_TRUE(weight_type_supported(TensorType::kQ8_0));
  EXPECT_TRUE(weight_type_supported(TensorType::kQ4_K));
  EXPECT_FALSE(weight_type_supported(TensorType::kIQ2_XXS));
  EXPECT_FALSE(weight_type_supported(TensorType::kQ8_K));
  EXPECT_NE(std::string(simd_target_name()), "");
}

}  // namespace
}  // namespace sluice::kernels
