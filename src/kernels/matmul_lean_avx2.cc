// The lean kernels (matmul_lean.cc, read its header first) on AVX2, vpmaddubsw and vpmaddwd
// standing in for vpdpbusd, in both 256-bit forms of matmul_lean_vec-inl.h: a 16-row group on
// two __m256i for one token, and for batches of the super-block types other than Q3_K, the group
// in two parts of 8 rows on one __m256i each. Without VNNI a dot product takes three
// instructions, and the super-block types keep up to five vectors a token (two halves' sums, the
// integer sums, the mins' sums, the result): in the pair form, twice that, so its tiles stop at
// two tokens and each weight vector unpacked serves two. On a part, tiles of four tokens (their
// state partly spilled to L1) spread each unpack over four. Measured
// (engine_bench, README), the parts form's 16-sequence step is 5-18% shorter for Q2_K, Q4_K,
// Q5_K, Q6_K and IQ4_XS, and longer for Q3_K, Q4_0 and Q8_0 (whose pair form already takes tiles
// of 4) and for one token. Both forms give each row the same integers and float steps.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/matmul_lean.h"
#include "kernels/packed_weight.h"
#include "kernels/quant_blocks.h"

#define SLUICE_LEAN_VNNI 0
#define SLUICE_LEAN_BITS 256
#define SLUICE_LEAN_PARTS 0
#include "kernels/matmul_lean-inl.h"
#undef SLUICE_LEAN_PARTS
#define SLUICE_LEAN_PARTS 1
#include "kernels/matmul_lean-inl.h"
#undef SLUICE_LEAN_PARTS
#undef SLUICE_LEAN_BITS
#undef SLUICE_LEAN_VNNI

namespace sluice::kernels {

void lean_avx2_matmul(const WeightView& w, const QuantizedActivations& xq, int64_t num_tokens, float* y,
                      int64_t group_begin, int64_t group_end) {
  if (num_tokens > 1 && lean_avx2_parts::matmul(w, xq, num_tokens, y, group_begin, group_end)) return;
  lean_avx2::matmul(w, xq, num_tokens, y, group_begin, group_end);
}

}  // namespace sluice::kernels
