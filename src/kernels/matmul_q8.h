// Integer-dot-product matmuls: Q8_0 (matmul_q8.cc) and the other block-quantized types
// (matmul_quant.cc); matmul() calls them for those weights.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "common/thread_pool.h"
#include "kernels/matmul.h"

namespace sluice::kernels {

// Activations quantized per token and block of `block` elements (32, or 256 for the super-block
// types, as their integer dot products need): x[k] ~= d[k / block] * q[k], d = max |x| / 127.
struct QuantizedActivations {
  std::vector<int8_t> q;      // [num_tokens, cols], each in [-127, 127]
  std::vector<float> d;       // [num_tokens, cols / block]
  std::vector<int16_t> sums;  // [num_tokens, cols / 16]: the sum of each 16 q (with_sums only)
  int block = 32;
};

// REQUIRES: cols % block == 0, block a multiple of 16.
void quantize_activations(const float* x, int64_t num_tokens, int64_t cols, QuantizedActivations& out,
                          int block = 32, bool with_sums = false);

// One parallel loop over the work units (rows, or row groups) of several targets, as one index
// space: target i owns [first[i], first[i + 1]). Calls part(i, begin, end) with a range of
// target i's own units; a range of the loop that spans targets is split at their seams.
template <class UnitsOf, class Part>
void parallel_over_targets(ThreadPool& pool, std::span<const MatmulTarget> targets, UnitsOf units_of,
                           int64_t grain, const Part& part) {
  std::vector<int64_t> first(targets.size() + 1, 0);
  for (size_t i = 0; i < targets.size(); ++i) first[i + 1] = first[i] + units_of(targets[i].w);
  pool.parallel_for(
      first.back(),
      [&](int64_t b, int64_t e) {
        for (size_t i = 0; i < targets.size(); ++i) {
          const int64_t lo = std::max(b, first[i]), hi = std::min(e, first[i + 1]);
          if (lo < hi) part(i, lo - first[i], hi - first[i]);
        }
      },
      grain);
}

// matmul_multi for Q8_0 weights. REQUIRES: every target's type is Q8_0, cols equal.
void matmul_q8_0(ThreadPool& pool, std::span<const MatmulTarget> targets, const float* x, int64_t num_tokens);

// matmul_multi for one block-quantized type (quant_blocks.h). REQUIRES: every target's type is
// that type, cols equal and a multiple of the type's block.
void matmul_quant(ThreadPool& pool, std::span<const MatmulTarget> targets, const float* x, int64_t num_tokens);

// Which code matmul_quant runs for num_tokens tokens on the active kernel path: the Highway
// vector code on the file's blocks (generic, or avx2 on weights not repacked, and for Q8_0
// matmul_q8_0), or one of the instruction paths (the lean kernels on every x86 path).
enum class QuantRoute { kVector, kVnni256, kVnni512, kLeanAvx2, kLean256, kLean512, kAmx };
QuantRoute quant_route(std::span<const MatmulTarget> targets, int64_t num_tokens);

}  // namespace sluice::kernels
