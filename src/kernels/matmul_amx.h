// The AMX-INT8 path of the quantized matmul (matmul_amx.cc). Only for kernel_path.h's kAmx.
#pragma once

#include <cstdint>

#include "kernels/matmul.h"
#include "kernels/matmul_q8.h"

namespace sluice::kernels {

inline constexpr int kAmxGroupRows = 16;
// Fewer tokens than this go to the avx2 code even on the AMX path (a tile of 16 token rows would
// be mostly padding); the results are the same bits either way.
inline constexpr int64_t kAmxMinTokens = 4;

// Rows 16 * group_begin up to 16 * group_end (or w.rows) of y = x W^T, for any block-quantized
// type. xq: the activations quantized as matmul_quant does for the type (sums for min types).
void amx_matmul_groups(const WeightView& w, const QuantizedActivations& xq, int64_t num_tokens, float* y,
                       int64_t group_begin, int64_t group_end);

}  // namespace sluice::kernels
