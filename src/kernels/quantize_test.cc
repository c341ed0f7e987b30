#include "kernels/quantize.h"

#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/matmul.h"
#include "kernels/quant_blocks.h"

namespace sluice::kernels {
namespace {

using gguf::TensorType;

struct Case {
  TensorType type;
  double max_relative_rms;  // of the round-trip error, over Gaussian data
};

class QuantizeTest : public ::testing::TestWithParam<Case> {};

std::vector<float> round_trip(TensorType type, const std::vector<float>& x) {
  std::vector<uint8_t> bytes(quantized_bytes(type, static_cast<int64_t>(x.size())));
  quantize_row(type, x.data(), static_cast<int64_t>(x.size()), bytes.data());
  std::vector<float> y(x.size());
  const WeightView w{bytes.data(), type, 1, static_cast<int64_t>(x.size())};
  dequantize_row(w, 0, y.data());
  return y;
}

// Quantizing then dequantizing keeps Gaussian data within the type's precision.
TEST_P(QuantizeTest, RoundTripErrorIsTheTypesPrecision) {
  const auto [type, bound] = GetParam();
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(16 * 256);
  for (auto& v : x) v = dist(rng);
  const auto y = round_trip(type, x);
  double se = 0, sx = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    se += (x[i] - y[i]) * (x[i] - y[i]);
    sx += x[i] * x[i];
  }
  const double rel = std::sqrt(se / sx);
  EXPECT_LT(rel, bound) << gguf::tensor_type_name(type);
  EXPECT_GT(rel, bound / 8) << "suspiciously exact for " << gguf::tensor_type_name(type);
}

// Blocks of zeros, of one repeated value, and of one spike among zeros stay finite and close.
TEST_P(QuantizeTest, DegenerateBlocks) {
  const TensorType type = GetParam().type;
  for (const float fill : {0.0f, 1.5f, -0.25f}) {
    std::vector<float> x(512, fill);
    x[7] = fill == 0 ? 3.0f : fill;
    const auto y = round_trip(type, x);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_TRUE(std::isfinite(y[i])) << i;
      ASSERT_NEAR(y[i], x[i], 0.2 * std::abs(x[i]) + 0.2) << gguf::tensor_type_name(type) << " fill " << fill << " at " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllTypes, QuantizeTest,
    ::testing::Values(Case{TensorType::kF16, 1e-3}, Case{TensorType::kQ8_0, 0.01}, Case{TensorType::kQ6_K, 0.03},
                      Case{TensorType::kQ5_0, 0.06}, Case{TensorType::kQ5_1, 0.06}, Case{TensorType::kQ5_K, 0.06},
                      Case{TensorType::kQ4_0, 0.12}, Case{TensorType::kQ4_1, 0.12}, Case{TensorType::kQ4_K, 0.12},
                      Case{TensorType::kIQ4_NL, 0.12}, Case{TensorType::kIQ4_XS, 0.12}, Case{TensorType::kQ3_K, 0.25},
                      Case{TensorType::kQ2_K, 0.5}),
    [](const auto& info) { return std::string(gguf::tensor_type_name(info.param.type)); });

}  // namespace
}  // namespace sluice::kernels
