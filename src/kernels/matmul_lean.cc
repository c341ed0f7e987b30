// The kernels of the lean form (packed_weight.h) on AVX-512 VNNI, on AVX-VNNI and on AVX2: the
// quantized matmul for any number of tokens straight from the repacked levels, and (AVX-512) the
// decoding of a chunk of them for the tile kernels. The same integers and float steps as
// matmul_quant.cc (read its header first), so the same bits as every other path.
//
// The form holds each row group's levels transposed for vpdpbusd (lane r of a step: row r's four
// levels) as unsigned bytes u = q + offset, in about the file's bytes: a step's vector comes from
// one load (Q8_0), and a mask, or a shift and a mask (the last steps of Q3_K, Q5_* and Q6_K: a few of
// each, gathering the bits spread over the spare bits of the others), never a transpose. The
// activations are the signed operand (x, quantized per 32 or 256 with the sums of each 16); the
// offset comes off exactly per 16-element half as offset * sum(x) (on AVX2, Q8_0's and the IQ4
// levels are multiplied as the signed q instead, with no offset: matmul_lean-inl.h). A row group's
// bytes stream from memory once (the next group's are asked for over this one's sub-blocks) and
// stay in L1 or L2 while tiles of up to four tokens run over them, each token with accumulators
// of its own: a weight vector, unpacked once, feeds one vpdpbusd per token (on AVX2, vpmaddubsw
// and vpmaddwd). Measured on the avx512 path (README), this beats the tile form (1.1 to 1.75 bytes
// a weight, decoded already) at every token count up to 512, so that path keeps the lean form
// only; the amx path still reads tiles from 8 tokens on.
//
// One body (matmul_lean-inl.h) compiled per instruction set: here on 512-bit vectors; on
// 256-bit ones, without AVX-512's mask registers, for the avxvnni path (matmul_lean256.cc) and,
// with vpmaddubsw and vpmaddwd for vpdpbusd, for the avx2 path (matmul_lean_avx2.cc): a 16-row
// group on two vectors, and on the avx2 path for batches of some types also in two parts of 8
// rows, one vector each (tiles of up to 4 tokens).
#include "kernels/matmul_lean.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/packed_weight.h"
#include "kernels/quant_blocks.h"

#define SLUICE_LEAN_VNNI 1
#define SLUICE_LEAN_BITS 512
#define SLUICE_LEAN_PARTS 0
#include "kernels/matmul_lean-inl.h"
#undef SLUICE_LEAN_PARTS
#undef SLUICE_LEAN_BITS
#undef SLUICE_LEAN_VNNI

namespace sluice::kernels {

void lean512_matmul(const WeightView& w, const QuantizedActivations& xq, int64_t num_tokens, float* y,
                    int64_t group_begin, int64_t group_end) {
  lean512::matmul(w, xq, num_tokens, y, group_begin, group_end);
}

void lean_decode_chunk16(const WeightView& w, int64_t g, int64_t b0, int nb, DecodedChunk<16>& c) {
  lean512::decode_chunk16(w, g, b0, nb, c);
}

}  // namespace sluice::kernels
