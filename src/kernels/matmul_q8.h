// Q8_0 matmul on integer dot products (see matmul_q8.cc); matmul() calls it for Q8_0 weights.
#pragma once

#include <cstdint>
#include <vector>

#include "common/thread_pool.h"
#include "kernels/matmul.h"

namespace sluice::kernels {

// Activations quantized per token and block of 32: x ~= d[block] * q[k].
struct QuantizedActivations {
  std::vector<int8_t> q;  // [num_tokens, cols], each in [-127, 127]
  std::vector<float> d;   // [num_tokens, cols / 32]
};

// REQUIRES: cols % 32 == 0.
void quantize_activations(const float* x, int64_t num_tokens, int64_t cols, QuantizedActivations& out);

// matmul_multi for Q8_0 weights. REQUIRES: every target's type is Q8_0, cols equal.
void matmul_q8_0(ThreadPool& pool, std::span<const MatmulTarget> targets, const float* x, int64_t num_tokens);

}  // namespace sluice::kernels
