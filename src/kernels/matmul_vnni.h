// The VNNI paths of the quantized matmul (matmul_vnni.cc): kernel_path.h's kAvx512 (512-bit
// vpdpbusd, row groups of 16) and kAvxVnni (its 256-bit VEX form, row groups of 8).
#pragma once

#include <cstdint>

#include "kernels/decoded_chunk.h"
#include "kernels/matmul.h"
#include "kernels/matmul_q8.h"

namespace sluice::kernels {

inline constexpr int kVnni512GroupRows = 16;
inline constexpr int kVnni256GroupRows = 8;
// Weights repacked at load go to the lean kernels (matmul_lean.h; quant_route says when); one
// token on weights as loaded goes to the avx2 code's direct path (it reads each row once, straight
// from the weights; a decoded chunk would be used once); the results are the same bits either way.
inline constexpr int64_t kVnniMinTokens = 2;

// Rows kRows * group_begin up to kRows * group_end (or w.rows) of y = x W^T, for any
// block-quantized type. xq: the activations quantized as matmul_quant does for the type; xu:
// the same levels plus 128 as unsigned bytes (xq.q[i] ^ 0x80), vpdpbusd's unsigned operand.
void vnni512_matmul_groups(const WeightView& w, const QuantizedActivations& xq, const uint8_t* xu, int64_t num_tokens,
                           float* y, int64_t group_begin, int64_t group_end);
void vnni256_matmul_groups(const WeightView& w, const QuantizedActivations& xq, const uint8_t* xu, int64_t num_tokens,
                           float* y, int64_t group_begin, int64_t group_end);

}  // namespace sluice::kernels
