// The VNNI paths of the quantized matmul (kernel_path.h): the same integers and float steps as
// matmul_quant.cc (read its header first), with the integer dot products on vpdpbusd.
//
// vpdpbusd multiplies unsigned bytes by signed ones, four products to each int32 lane. The
// weights' levels are signed; the activations' are signed too, so they go in as x + 128
// (unsigned, 1..255) and the excess is taken off exactly:
//
//   sum (x + 128) w = sum x w + 128 sum w,   sum w from one more vpdpbusd with bytes of 1
//
// per row, per 16-element half, shared by every token of a tile. AVX-512 has no vpsignb, so the
// sign trick of the avx2 code (|w| times x with w's sign) would cost two operations per token
// instead of this one per tile. Rows go in groups of 16 (one 512-bit vector of int32, one row per
// lane) or 8 (256 bits); each chunk of up to 32 sub-blocks is decoded by matmul_quant.cc's SIMD
// decoders into its transposed layout (decoded_chunk.h), and tokens go in tiles of 8.
//
// The kernels are compiled with target attributes (not Highway) once per vector width from
// matmul_vnni-inl.h: they run only where kernel_path.h found the instructions.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "kernels/matmul_vnni.h"
#include "kernels/decoded_chunk.h"
#include "kernels/matmul_lean.h"
#include "kernels/packed_weight.h"
#include "kernels/quant_blocks.h"

#define SLUICE_VNNI_BITS 512
#include "kernels/matmul_vnni-inl.h"
#undef SLUICE_VNNI_BITS

#define SLUICE_VNNI_BITS 256
#include "kernels/matmul_vnni-inl.h"
#undef SLUICE_VNNI_BITS

namespace sluice::kernels {

void vnni512_matmul_groups(const WeightView& w, const QuantizedActivations& xq, const uint8_t* xu, int64_t num_tokens,
                           float* y, int64_t group_begin, int64_t group_end) {
  vnni512::matmul_groups(w, xq, xu, num_tokens, y, group_begin, group_end);
}

void vnni256_matmul_groups(const WeightView& w, const QuantizedActivations& xq, const uint8_t* xu, int64_t num_tokens,
                           float* y, int64_t group_begin, int64_t group_end) {
  vnni256::matmul_groups(w, xq, xu, num_tokens, y, group_begin, group_end);
}

}  // namespace sluice::kernels
