#include "kernels/matmul.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "common/half.h"

namespace sluice::kernels {
namespace {

using gguf::TensorType;

// Random weights of `type`, with their exact float values for the reference.
struct TestWeight {
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // [rows, cols], as the kernel must see them
  WeightView view;
};

TestWeight make_weight(TensorType type, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  TestWeight w;
  w.values.resize(rows * cols);
  for (auto& v : w.values) v = dist(rng);
  switch (type) {
    case TensorType::kF32:
      w.bytes.resize(rows * cols * 4);
      std::memcpy(w.bytes.data(), w.values.data(), w.bytes.size());
      break;
    case TensorType::kF16:
    case TensorType::kBF16:
      w.bytes.resize(rows * cols * 2);
      for (int64_t i = 0; i < rows * cols; ++i) {
        uint16_t h = type == TensorType::kF16 ? f32_to_f16(w.values[i]) : f32_to_bf16(w.values[i]);
        std::memcpy(&w.bytes[2 * i], &h, 2);
        w.values[i] = type == TensorType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      break;
    case TensorType::kQ8_0: {
      const int64_t nb = rows * cols / 32;
      w.bytes.resize(nb * sizeof(gguf::BlockQ8_0));
      for (int64_t b = 0; b < nb; ++b) {
        gguf::BlockQ8_0 block;
        uint16_t d = f32_to_f16(0.01f + 0.001f * static_cast<float>(b % 7));
        block.d = d;
        for (int j = 0; j < 32; ++j) {
          block.qs[j] = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
          w.values[b * 32 + j] = f16_to_f32(d) * block.qs[j];
        }
        std::memcpy(&w.bytes[b * sizeof(block)], &block, sizeof(block));
      }
      break;
    }
    default:
      ADD_FAILURE() << "unsupported";
  }
  w.view = {w.bytes.data(), type, rows, cols};
  return w;
}

std::vector<float> random_x(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = dist(rng);
  return x;
}

class MatmulTest : public ::testing::TestWithParam<TensorType> {};

TEST_P(MatmulTest, MatchesDoubleReference) {
  const int64_t rows = 37, cols = 96, tokens = 5;
  TestWeight w = make_weight(GetParam(), rows, cols, 1);
  auto x = random_x(tokens * cols, 2);
  std::vector<float> y(tokens * rows);
  ThreadPool pool(2);
  matmul(pool, w.view, x.data(), tokens, y.data());
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t n = 0; n < rows; ++n) {
      double ref = 0, mag = 0, quant_bound = 0;
      for (int64_t k = 0; k < cols; ++k) {
        ref += double{w.values[n * cols + k]} * x[t * cols + k];
        mag += std::abs(double{w.values[n * cols + k]} * x[t * cols + k]);
        if (GetParam() == TensorType::kQ8_0) {
          // Q8_0 quantizes activations per block of 32: each is off by at most half a step.
          const int64_t b0 = t * cols + k / 32 * 32;
          double amax = 0;
          for (int j = 0; j < 32; ++j) amax = std::max(amax, double{std::abs(x[b0 + j])});
          quant_bound += std::abs(double{w.values[n * cols + k]}) * amax / 127 / 2;
        }
      }
      EXPECT_NEAR(y[t * rows + n], ref, 1e-5 * mag + quant_bound + 1e-6) << "t=" << t << " n=" << n;
      if (GetParam() == TensorType::kQ8_0) {
        // The bound is not vacuous: it is a small fraction of the products' magnitude.
        EXPECT_LT(quant_bound, 0.02 * mag);
      }
    }
  }
}

TEST_P(MatmulTest, TokenResultIsBitIdenticalWhateverTheBatch) {
  const int64_t rows = 70, cols = 160;
  TestWeight w = make_weight(GetParam(), rows, cols, 3);
  const int64_t max_tokens = 11;
  auto x = random_x(max_tokens * cols, 4);
  ThreadPool pool1(1), pool3(3);
  // Token 0 alone is the reference for itself; every other batch must reproduce every row.
  std::vector<std::vector<float>> alone(max_tokens, std::vector<float>(rows));
  for (int64_t t = 0; t < max_tokens; ++t) matmul(pool1, w.view, x.data() + t * cols, 1, alone[t].data());
  for (int64_t n_tokens = 1; n_tokens <= max_tokens; ++n_tokens) {
    for (ThreadPool* pool : {&pool1, &pool3}) {
      std::vector<float> y(n_tokens * rows);
      matmul(*pool, w.view, x.data(), n_tokens, y.data());
      for (int64_t t = 0; t < n_tokens; ++t) {
        ASSERT_EQ(0, std::memcmp(y.data() + t * rows, alone[t].data(), rows * sizeof(float)))
            << "token " << t << " in a batch of " << n_tokens;
      }
    }
  }
}

TEST_P(MatmulTest, DequantizeRowMatchesValues) {
  TestWeight w = make_weight(GetParam(), 3, 64, 5);
  std::vector<float> row(64);
  dequantize_row(w.view, 2, row.data());
  for (int k = 0; k < 64; ++k) EXPECT_EQ(row[k], w.values[2 * 64 + k]);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MatmulTest,
                         ::testing::Values(TensorType::kF32, TensorType::kF16, TensorType::kBF16,
                                           TensorType::kQ8_0),
                         [](const auto& info) { return std::string(gguf::tensor_type_name(info.param)); });

TEST(Matmul, SupportedTypes) {
  EXPECT_TRUE(weight_type_supported(TensorType::kQ8_0));
  EXPECT_FALSE(weight_type_supported(TensorType::kQ4_K));
  EXPECT_NE(std::string(simd_target_name()), "");
}

}  // namespace
}  // namespace sluice::kernels
