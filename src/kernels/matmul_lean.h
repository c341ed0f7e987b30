// The lean form's kernels (matmul_lean.cc, matmul_lean256.cc, matmul_lean_avx2.cc): AVX-512 VNNI,
// AVX-VNNI and AVX2 code that reads the lean form of a repacked weight (packed_weight.h) in place,
// for any number of tokens.
#pragma once

#include <cstdint>

#include "kernels/decoded_chunk.h"
#include "kernels/matmul.h"
#include "kernels/matmul_q8.h"

namespace sluice::kernels {

// Rows 16 * group_begin up to 16 * group_end (or w.rows) of y = x W^T for num_tokens tokens, from
// the lean form of w.packed. xq: the activations quantized as matmul_quant does for the type
// (per 32, or per 256 for the super-block types), with the 16-element sums.
// The same bits from each. REQUIRES: w.packed->lean(); AVX-512 VNNI (lean512), AVX-VNNI
// (lean256) or AVX2 (lean_avx2).
void lean512_matmul(const WeightView& w, const QuantizedActivations& xq, int64_t num_tokens, float* y,
                    int64_t group_begin, int64_t group_end);
void lean256_matmul(const WeightView& w, const QuantizedActivations& xq, int64_t num_tokens, float* y,
                    int64_t group_begin, int64_t group_end);
void lean_avx2_matmul(const WeightView& w, const QuantizedActivations& xq, int64_t num_tokens, float* y,
                      int64_t group_begin, int64_t group_end);

// Sub-blocks [b0, b0 + nb) of row group g (16 rows) decoded from w.packed's lean form, as
// decode_chunk16 decodes them from the file's blocks. REQUIRES: w.packed->lean(), AVX-512 VNNI.
void lean_decode_chunk16(const WeightView& w, int64_t g, int64_t b0, int nb, DecodedChunk<16>& c);

}  // namespace sluice::kernels
