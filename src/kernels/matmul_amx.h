// The AMX-INT8 path of the quantized matmul (matmul_amx.cc). Only for kernel_path.h's kAmx.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/matmul_q8.h"

namespace sluice::kernels {

inline constexpr int kAmxGroupRows = 16;
// Fewer tokens than this go to the avx512 code even on the AMX path (its lean kernels on weights
// repacked at load, else chunks decoded at run time): a tile of 16 token rows would be mostly
// padding, and matmul_bench measured avx512 ahead at 4 tokens, even at 8, behind at 16
// (Qwen2.5-0.5B shapes, Q8_0). That was avx512's kernel on the tile form, which the lean
// kernels since beat by up to 2.6x on Zen 4: to be measured again on an AMX machine. The same
// bits either way.
inline constexpr int64_t kAmxMinTokens = 8;

// The palette-1 tile configuration (Intel SDM, LDTILECFG): 64 bytes.
struct alignas(64) AmxTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// The quantized activations in the layout of the tiles, once per matmul: for each tile of 16
// tokens (the last one zero-padded), each 32-element sub-block's 16 x 32 bytes contiguous, so a
// tile load reads 8 whole cache lines in a row rather than halves of 16 lines a row apart; the
// scales and 16-element sums likewise 16 tokens to a cache line.
struct AmxActivations {
  int64_t tiles = 0;
  std::vector<int8_t> q;       // [tiles][cols / 32][16][32]
  std::vector<float> d;        // [tiles][cols / block][16]
  std::vector<int16_t> sums;   // [tiles][cols / 16][16], empty when xq has none
};
AmxActivations pack_amx_activations(const QuantizedActivations& xq, int64_t num_tokens, int64_t cols);

// Rows 16 * group_begin up to 16 * group_end (or w.rows) of y = x W^T, for any block-quantized
// type. xa: the activations quantized as matmul_quant does for the type (sums for min types), packed.
void amx_matmul_groups(const WeightView& w, const AmxActivations& xa, int64_t num_tokens, float* y,
                       int64_t group_begin, int64_t group_end);

}  // namespace sluice::kernels
