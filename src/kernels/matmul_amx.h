// The AMX-INT8 path of the quantized matmul (matmul_amx.cc). Only for kernel_path.h's kAmx.
#pragma once

#include <cstdint>

#include "kernels/matmul.h"
#include "kernels/matmul_q8.h"

namespace sluice::kernels {

inline constexpr int kAmxGroupRows = 16;
// Fewer tokens than this go to the avx512 code (its one-token kernel for one) even on the AMX path: a
// tile of 16 token rows would be mostly padding, and matmul_bench measured avx512 ahead at 4
// tokens, even at 8, behind at 16 (Qwen2.5-0.5B shapes, Q8_0). The same bits either way.
inline constexpr int64_t kAmxMinTokens = 8;

// The palette-1 tile configuration (Intel SDM, LDTILECFG): 64 bytes.
struct alignas(64) AmxTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Rows 16 * group_begin up to 16 * group_end (or w.rows) of y = x W^T, for any block-quantized
// type. xq: the activations quantized as matmul_quant does for the type (sums for min types).
void amx_matmul_groups(const WeightView& w, const QuantizedActivations& xq, int64_t num_tokens, float* y,
                       int64_t group_begin, int64_t group_end);

}  // namespace sluice::kernels
