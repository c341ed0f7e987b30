// Test support for the matmul tests: random weights of every type with their exact values, the
// activations, and the row lengths that exercise every path.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/half.h"
#include "kernels/matmul.h"
#include "kernels/quant_blocks.h"
#include "kernels/quant_test_util.h"

namespace sluice::kernels::testing {

using gguf::TensorType;

// Every type the matmul computes.
inline const std::vector<TensorType> kMatmulTestTypes = {
    TensorType::kF32,  TensorType::kF16,  TensorType::kBF16, TensorType::kQ8_0,   TensorType::kQ4_0,
    TensorType::kQ4_1, TensorType::kQ5_0, TensorType::kQ5_1, TensorType::kIQ4_NL, TensorType::kQ2_K,
    TensorType::kQ3_K, TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K,   TensorType::kIQ4_XS};

// A parameterized test's name: the type's.
inline std::string type_name(const ::testing::TestParamInfo<TensorType>& info) {
  return std::string(gguf::tensor_type_name(info.param));
}

// Random weights of `type`, with their exact float values for the reference.
struct TestWeight {
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // [rows, cols], as the kernel must see them
  WeightView view;
};

inline TestWeight make_weight(TensorType type, int64_t rows, int64_t cols, uint32_t seed) {
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
    default: {
      if (!is_block_quant(type)) {
        ADD_FAILURE() << "unsupported";
        break;
      }
      w.bytes = testing::random_blocks(type, rows, cols, seed);
      const auto values = testing::naive_dequantize(type, w.bytes.data(), rows, cols);
      for (int64_t i = 0; i < rows * cols; ++i) w.values[i] = static_cast<float>(values[i]);
    }
  }
  w.view = {w.bytes.data(), type, rows, cols};
  return w;
}

inline std::vector<float> random_x(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = dist(rng);
  return x;
}

// Columns that exercise every path: quantized rows of 35 or 40 sub-blocks span two chunks of
// the kernels' transposition (32 sub-blocks, then the rest); dense rows of 1003 end with a
// scalar tail after the 8-lane vectors.
inline int64_t test_cols(TensorType type) {
  if (!is_block_quant(type)) return 1003;
  return block_elements(type) == kSuperBlock ? 5 * kSuperBlock : 35 * 32;
}
// The shortest row of the type that the tests use (one super-block for the K-quants).
inline int64_t short_cols(TensorType type) { return is_block_quant(type) ? block_elements(type) : 64; }

}  // namespace sluice::kernels::testing
