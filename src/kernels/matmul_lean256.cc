// The lean kernels (matmul_lean.cc, read its header first) on AVX-VNNI, the VEX form for CPUs
// without AVX-512: a 16-row group on two __m256i (matmul_lean_vec-inl.h). The parts form (8-row
// parts on one __m256i, tiles of 4 tokens), measured on this path against it, was no faster for
// batches of most types and slower for some (Q2_K prefill, IQ4_XS), so it is the AVX2 path's only.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/matmul_lean.h"
#include "kernels/packed_weight.h"
#include "kernels/quant_blocks.h"

#define SLUICE_LEAN_VNNI 1
#define SLUICE_LEAN_BITS 256
#define SLUICE_LEAN_PARTS 0
#include "kernels/matmul_lean-inl.h"
#undef SLUICE_LEAN_PARTS
#undef SLUICE_LEAN_BITS
#undef SLUICE_LEAN_VNNI

namespace sluice::kernels {

void lean256_matmul(const WeightView& w, const QuantizedActivations& xq, int64_t num_tokens, float* y,
                    int64_t group_begin, int64_t group_end) {
  lean256::matmul(w, xq, num_tokens, y, group_begin, group_end);
}

}  // namespace sluice::kernels
