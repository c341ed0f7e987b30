// Matrix products against GGUF weights, the hot loop of the forward pass.
//
// A weight is `rows` rows of `cols` elements in one of the supported ggml layouts (F32, F16,
// BF16, and the block-quantized types of quant_blocks.h: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL,
// Q2_K ... Q6_K, IQ4_XS). matmul computes y[t, n] = sum_k x[t, k] * W[n, k]: exactly (up to
// float rounding) for the float types; for the quantized ones with activations quantized to 8
// bits per block of 32 (matmul_q8.cc states the error bound).
//
// Batch invariance (DESIGN.md, invariant 1): y[t, n] is one dot product, computed by one
// thread, with SIMD lanes and blocks reduced in a fixed order. Tokens are processed in tiles
// that share weight loads, but each token keeps its own accumulators, so a token's result is
// bit-identical whatever the number of tokens, the tile it lands in, or the thread count.
//
// SIMD through Google Highway with runtime dispatch to the best target of the machine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "common/thread_pool.h"
#include "gguf/gguf_types.h"

namespace sluice::kernels {

class PackedWeight;

struct WeightView {
  const uint8_t* data = nullptr;
  gguf::TensorType type = gguf::TensorType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  // The same weight repacked for the 16-row kernels (packed_weight.h), or null: they decode it
  // at run time then. Other paths read data.
  const PackedWeight* packed = nullptr;

  size_t row_bytes() const;
  const uint8_t* row(int64_t n) const { return data + static_cast<size_t>(n) * row_bytes(); }
};

// Whether the kernels compute with weights of this type.
bool weight_type_supported(gguf::TensorType type);

// y: [num_tokens, w.rows]; x: [num_tokens, w.cols]. REQUIRES: supported type.
void matmul(ThreadPool& pool, const WeightView& w, const float* x, int64_t num_tokens, float* y);

// One weight of several multiplied by the same activations, and where its output goes
// ([num_tokens, w.rows]).
struct MatmulTarget {
  WeightView w;
  float* y = nullptr;
};

// matmul for each target, as one parallel loop over the rows of all of them (and, for Q8_0,
// one quantization of x): fewer hand-offs to the thread pool for the q/k/v and gate/up
// projections. Results are bit-identical to separate matmul calls.
// REQUIRES: every w has x's cols; supported types.
void matmul_multi(ThreadPool& pool, std::span<const MatmulTarget> targets, const float* x, int64_t num_tokens);

// Writes row n of w as floats (embedding look-up).
void dequantize_row(const WeightView& w, int64_t n, float* out);

// Name of the SIMD target the kernels dispatch to on this machine (e.g. "AVX2").
const char* simd_target_name();

}  // namespace sluice::kernels
