// A chunk of a row group's quantized weights decoded for the integer kernels: the levels of up to
// 32 sub-blocks of kN rows, transposed so that 32-bit lane r of step j holds row r's levels
// 4j..4j+3 (for 16 rows, exactly the weight operand of an AMX tile), with each sub-block's scales
// beside them (quant_blocks.h's decoded form).
#pragma once

#include <cstdint>

#include "gguf/gguf_types.h"
#include "kernels/matmul.h"

namespace sluice::kernels {

inline constexpr int kChunkSubBlocks = 32;

template <int kN>
struct DecodedChunk {
  alignas(64) int8_t w[kChunkSubBlocks][8][4 * kN];  // [i][j][4r + c]: row r, sub-block b0 + i, level 4j + c
  alignas(64) int32_t sc[kChunkSubBlocks][2][kN];
  alignas(64) int32_t m[kChunkSubBlocks][2][kN];
  alignas(64) float d[kChunkSubBlocks][kN];
  alignas(64) float dmin[kChunkSubBlocks][kN];
};

// The rows of row group g (kN rows from kN * g), a last partial group repeating its last row;
// returns how many are real.
template <int kN>
int64_t group_rows(const WeightView& w, int64_t g, const uint8_t* (&rows)[kN]) {
  const int64_t n0 = g * kN, num_rows = w.rows - n0 < kN ? w.rows - n0 : kN;
  for (int r = 0; r < kN; ++r) rows[r] = w.row(n0 + (r < num_rows ? r : num_rows - 1));
  return num_rows;
}

// Sub-blocks [b0, b0 + num_blocks) of the 16 (8) rows, with the SIMD decoders of matmul_quant.cc
// (the best Highway target of the machine).
void decode_chunk16(gguf::TensorType type, const uint8_t* const* rows, int64_t b0, int num_blocks,
                    DecodedChunk<16>& c);
void decode_chunk8(gguf::TensorType type, const uint8_t* const* rows, int64_t b0, int num_blocks,
                   DecodedChunk<8>& c);

}  // namespace sluice::kernels
