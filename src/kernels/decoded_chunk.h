// A chunk of a row group's quantized weights decoded for the integer kernels: the levels of up to
// 32 sub-blocks of kN rows, transposed so that 32-bit lane r of step j holds row r's levels
// 4j..4j+3 (for 16 rows, exactly the weight operand of an AMX tile), with each sub-block's scales
// beside them (quant_blocks.h's decoded form).
#pragma once

#include <cstdint>
#include <cstring>

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

// Where a chunk's fields are: a DecodedChunk, or the same fields of a chunk in a PackedWeight
// (packed_weight.h). The kernels read c.w[i][j], c.sc[i][h], ... the same way from either.
// Fields a type never reads (sc of the 32-element types, m and dmin of types without a min) may
// be null in a packed chunk.
template <int kN>
struct ChunkRef {
  const int8_t (*w)[8][4 * kN];
  const int32_t (*sc)[2][kN];
  const int32_t (*m)[2][kN];
  const float (*d)[kN];
  const float (*dmin)[kN];
};

template <int kN>
ChunkRef<kN> chunk_ref(const DecodedChunk<kN>& c) {
  return {c.w, c.sc, c.m, c.d, c.dmin};
}

// A row group's results, acc[t][r] for num_tokens tokens, into columns n0 .. n0 + num_rows of
// y's token rows (w.rows floats each). A full group's copy has a constant size, so it compiles
// to a few moves instead of a library call per token (10% of an AMX prefill's time).
template <int kN>
void store_group(const float* acc, int64_t num_tokens, int64_t num_rows, float* y, int64_t y_stride, int64_t n0) {
  if (num_rows == kN) {
    for (int64_t t = 0; t < num_tokens; ++t) std::memcpy(y + t * y_stride + n0, acc + t * kN, kN * sizeof(float));
    return;
  }
  for (int64_t t = 0; t < num_tokens; ++t) std::memcpy(y + t * y_stride + n0, acc + t * kN, num_rows * sizeof(float));
}

// Sub-blocks [b0, b0 + num_blocks) of the 16 (8) rows, with the SIMD decoders of matmul_quant.cc
// (the best Highway target of the machine).
void decode_chunk16(gguf::TensorType type, const uint8_t* const* rows, int64_t b0, int num_blocks,
                    DecodedChunk<16>& c);
void decode_chunk8(gguf::TensorType type, const uint8_t* const* rows, int64_t b0, int num_blocks,
                   DecodedChunk<8>& c);

}  // namespace sluice::kernels
