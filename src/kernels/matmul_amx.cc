// The AMX-INT8 path of the quantized matmul (kernel_path.h): the same integers and float steps as
// matmul_quant.cc (read its header first), with the integer dot products on tiles.
//
// Rows go in groups of 16 (a tile's 16 int32 columns); for each chunk of up to 32 sub-blocks, a
// group's levels are decoded into the tile layout of the weight operand (B row j holds, for each of
// the 16 rows, its 4 levels 4j..4j+3: matmul_quant.cc's transposition, for 16 rows), and tokens go
// in tiles of 16 (the activation operand A: 16 token rows of 32 bytes, packed once per matmul by
// pack_amx_activations so that each is 512 contiguous bytes; a last partial tile zero-padded). Per
// sub-block:
//
//   C = A x B           (tdpbssd: signed x signed bytes, 16 x 16 exact int32 dot products of 32,
//                        or two of 16 for the types whose 16-element halves have their own scales)
//   isum[t] += sc * C[t]  (AVX-512, 16 rows per vector)
//
// and at the end of each block of the weight type the float steps per (row, token), in the same
// order as every other path, so the results are bit-identical to the avx2 path's.
//
// Compiled with target attributes (not Highway): it runs only where kernel_path.h found AMX and the
// OS granted the tile state.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/decoded_chunk.h"
#include "kernels/kernel_path.h"
#include "kernels/matmul_lean.h"
#include "kernels/matmul_vnni.h"
#include "kernels/packed_weight.h"
#include "kernels/matmul_amx.h"
#include "kernels/quant_blocks.h"

#define SLUICE_AMX __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))

namespace sluice::kernels {
namespace {

constexpr int kRows = kAmxGroupRows;  // 16
constexpr int kChunk = kChunkSubBlocks;  // sub-blocks decoded at a time
constexpr int kTile = 16;             // tokens per tile

using TileConfig = AmxTileConfig;

// Two buffers of products, so one sub-block's dot products run while the previous one's epilogue
// reads its stored products. k = 32: tiles 0, 1 the products of buffers 0, 1; 2, 3 their
// activations; 4, 5 their weights. k = 16 (the half-scale types, two products per sub-block):
// tiles 0, 1 buffer 0's products, 2, 3 buffer 1's; 4, 5 the halves' activations, 6, 7 their
// weights.
TileConfig config(int k) {
  TileConfig c;
  auto set = [&](int t, int rows, int colsb) {
    c.rows[t] = static_cast<uint8_t>(rows);
    c.colsb[t] = static_cast<uint16_t>(colsb);
  };
  if (k == 32) {
    for (int t : {0, 1}) set(t, kTile, 64);
    for (int t : {2, 3}) set(t, kTile, 32);
    for (int t : {4, 5}) set(t, 8, 64);
  } else {
    for (int t : {0, 1, 2, 3}) set(t, kTile, 64);
    for (int t : {4, 5}) set(t, kTile, 16);
    for (int t : {6, 7}) set(t, 4, 64);
  }
  return c;
}

using AmxChunk = ChunkRef<kRows>;

// int32 lanes as floats (rounded to nearest, as every path converts). The masked form: GCC 12's
// plain one reads an undefined vector, which its -Wmaybe-uninitialized flags.
SLUICE_AMX inline __m512 to_float(__m512i v) { return _mm512_maskz_cvtepi32_ps(static_cast<__mmask16>(0xFFFF), v); }

// The products of sub-block i (activations at xa: 16 token rows of 32 bytes, contiguous) on buffer
// kBuf's tiles, stored to prod (prod[1]: the second half's, for the half-scale types). The tile
// numbers are literals: GCC's tile intrinsics paste them into the assembly text.
template <bool kHalves, int kBuf>
SLUICE_AMX inline void product(const AmxChunk& c, int i, const int8_t* xa, int32_t (*prod)[kTile][kRows]) {
  constexpr int64_t stride = kSubBlock;
  if constexpr (kHalves) {
    _tile_loadd(4, xa, stride);
    _tile_loadd(5, xa + 16, stride);
    _tile_loadd(6, c.w[i][0], 64);
    _tile_loadd(7, c.w[i][4], 64);
    if constexpr (kBuf == 0) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_dpbssd(0, 4, 6);
      _tile_dpbssd(1, 5, 7);
      _tile_stored(0, prod[0], 64);
      _tile_stored(1, prod[1], 64);
    } else {
      _tile_zero(2);
      _tile_zero(3);
      _tile_dpbssd(2, 4, 6);
      _tile_dpbssd(3, 5, 7);
      _tile_stored(2, prod[0], 64);
      _tile_stored(3, prod[1], 64);
    }
  } else if constexpr (kBuf == 0) {
    _tile_loadd(2, xa, stride);
    _tile_loadd(4, c.w[i][0], 64);
    _tile_zero(0);
    _tile_dpbssd(0, 2, 4);
    _tile_stored(0, prod[0], 64);
  } else {
    _tile_loadd(3, xa, stride);
    _tile_loadd(5, c.w[i][0], 64);
    _tile_zero(1);
    _tile_dpbssd(1, 3, 5);
    _tile_stored(1, prod[0], 64);
  }
}

// What a token tile's epilogue reads: the chunk, the tile's activations and its accumulators.
struct TileArgs {
  const AmxChunk& c;
  int64_t b0;
  const float* dx;      // the tile's scales: token t's of block q at dx[q * 16 + t]
  const int16_t* sums;  // its sums: token t's of 16 elements j at sums[j * 16 + t]
  float* acc;           // token t's 16 accumulators at acc + t * acc_stride
  int64_t acc_stride;
};

// The epilogue of sub-block i from its products p: the integer sums, and at the end of the type's
// block the float steps.
template <bool kHalves, bool kMin, int kSub>
SLUICE_AMX inline void epilogue(const TileArgs& g, int i, const int32_t (*p)[kTile][kRows], __m512i* isum,
                                __m512i* msum, __m512* a) {
  const AmxChunk& c = g.c;
  const int64_t b = g.b0 + i;
  for (int t = 0; t < kTile; ++t) {
    const __m512i lo = _mm512_load_si512(p[0][t]);
    if constexpr (kHalves) {
      isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(lo, _mm512_load_si512(c.sc[i][0])));
      isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(_mm512_load_si512(p[1][t]), _mm512_load_si512(c.sc[i][1])));
    } else if constexpr (kSub == 1) {
      isum[t] = lo;  // the 32-element types: integer scale 1, one block per sub-block
    } else {
      isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(lo, _mm512_load_si512(c.sc[i][0])));
    }
  }
  if constexpr (kMin) {
    // m0 == m1 unless the halves have their own scales, and the 32-element types' min is 1: the
    // same integer m0 s0 + m1 s1 with one vpmulld per token, or none (the epilogue's costliest
    // instruction: 2 uops on one port).
    const __m512i m0 = _mm512_load_si512(c.m[i][0]), m1 = _mm512_load_si512(c.m[i][1]);
    for (int t = 0; t < kTile; ++t) {
      const int32_t s0 = g.sums[2 * b * kTile + t], s1 = g.sums[(2 * b + 1) * kTile + t];
      if constexpr (kHalves) {
        msum[t] = _mm512_add_epi32(msum[t], _mm512_mullo_epi32(m0, _mm512_set1_epi32(s0)));
        msum[t] = _mm512_add_epi32(msum[t], _mm512_mullo_epi32(m1, _mm512_set1_epi32(s1)));
      } else if constexpr (kSub == 1) {
        msum[t] = _mm512_add_epi32(msum[t], _mm512_set1_epi32(s0 + s1));
      } else {
        msum[t] = _mm512_add_epi32(msum[t], _mm512_mullo_epi32(m0, _mm512_set1_epi32(s0 + s1)));
      }
    }
  }
  if ((b + 1) % kSub != 0) return;
  const int64_t q = b / kSub;
  const __m512 d = _mm512_load_ps(c.d[i]);
  if constexpr (kSub == 1) {  // the accumulators stay in registers across the chunk (a)
    for (int t = 0; t < kTile; ++t) {
      const __m512 xs = _mm512_set1_ps(g.dx[q * kTile + t]);
      a[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, xs), to_float(isum[t]), a[t]);
      if constexpr (kMin) a[t] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_load_ps(c.dmin[i]), xs), to_float(msum[t]), a[t]);
      msum[t] = _mm512_setzero_si512();
    }
    return;
  }
  for (int t = 0; t < kTile; ++t) {
    const __m512 xs = _mm512_set1_ps(g.dx[q * kTile + t]);
    __m512 a = _mm512_loadu_ps(g.acc + t * g.acc_stride);
    a = _mm512_fmadd_ps(_mm512_mul_ps(d, xs), to_float(isum[t]), a);
    if constexpr (kMin) a = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_load_ps(c.dmin[i]), xs), to_float(msum[t]), a);
    _mm512_storeu_ps(g.acc + t * g.acc_stride, a);
    isum[t] = msum[t] = _mm512_setzero_si512();
  }
}

// One token tile over one chunk. A super-block never spans chunks (a chunk is 32 sub-blocks, a
// multiple of 8), so the integer sums start at zero. Software-pipelined: sub-block i + 1's
// products are issued on the other buffer before sub-block i's epilogue, so the tile unit works
// while the vector units do the epilogue, and an epilogue never waits for the store it reads.
template <bool kHalves, bool kMin, int kSub>
SLUICE_AMX void tile(const AmxChunk& c, int64_t b0, int num_blocks, const int8_t* x, const float* dx,
                     const int16_t* sums, float* acc, int64_t acc_stride, bool first) {
  alignas(64) int32_t prod[2][2][kTile][kRows];
  __m512i isum[kTile], msum[kTile];
  for (int t = 0; t < kTile; ++t) isum[t] = msum[t] = _mm512_setzero_si512();
  const TileArgs g{c, b0, dx, sums, acc, acc_stride};
  __m512 a[kTile];
  // The first chunk starts the accumulators at zero (the super-block types' epilogue reads them).
  if constexpr (kSub == 1) {
    for (int t = 0; t < kTile; ++t) a[t] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + t * acc_stride);
  } else if (first) {
    for (int t = 0; t < kTile; ++t) _mm512_storeu_ps(acc + t * acc_stride, _mm512_setzero_ps());
  }
  constexpr int64_t kStep = kTile * kSubBlock;  // a sub-block's activations in the tile's layout
  product<kHalves, 0>(c, 0, x + b0 * kStep, prod[0]);
  for (int i = 0; i < num_blocks; ++i) {
    if (i + 1 < num_blocks) {
      const int8_t* xa = x + (b0 + i + 1) * kStep;
      if ((i + 1) % 2 == 0) {
        product<kHalves, 0>(c, i + 1, xa, prod[0]);
      } else {
        product<kHalves, 1>(c, i + 1, xa, prod[1]);
      }
    }
    epilogue<kHalves, kMin, kSub>(g, i, prod[i % 2], isum, msum, a);
  }
  if constexpr (kSub == 1) {
    for (int t = 0; t < kTile; ++t) _mm512_storeu_ps(acc + t * acc_stride, a[t]);
  }
}

// The type's traits as the kernel needs them, and its tile function.
struct Traits {
  bool halves, min;
  void (*run)(const AmxChunk&, int64_t, int, const int8_t*, const float*, const int16_t*, float*, int64_t, bool);
};

Traits traits(gguf::TensorType t) {
  const bool halves = has_half_scales(t), min = has_min(t), super = block_elements(t) == kSuperBlock;
  if (!super) return {false, min, min ? tile<false, true, 1> : tile<false, false, 1>};
  if (halves) return {true, min, min ? tile<true, true, 8> : tile<true, false, 8>};
  return {false, min, min ? tile<false, true, 8> : tile<false, false, 8>};
}

}  // namespace

AmxActivations pack_amx_activations(const QuantizedActivations& xq, int64_t num_tokens, int64_t cols) {
  AmxActivations p;
  p.tiles = (num_tokens + kTile - 1) / kTile;
  const int64_t blocks = cols / kSubBlock, scales = cols / xq.block, sums = xq.sums.empty() ? 0 : cols / 16;
  p.q.assign(p.tiles * kTile * cols, 0);
  p.d.assign(p.tiles * kTile * scales, 0.0f);
  p.sums.assign(p.tiles * kTile * sums, 0);
  for (int64_t n = 0; n < num_tokens; ++n) {
    const int64_t tt = n / kTile, t = n % kTile;
    for (int64_t b = 0; b < blocks; ++b) {
      std::memcpy(&p.q[((tt * blocks + b) * kTile + t) * kSubBlock], &xq.q[n * cols + b * kSubBlock], kSubBlock);
    }
    for (int64_t q = 0; q < scales; ++q) p.d[(tt * scales + q) * kTile + t] = xq.d[n * scales + q];
    for (int64_t j = 0; j < sums; ++j) p.sums[(tt * sums + j) * kTile + t] = xq.sums[n * sums + j];
  }
  return p;
}

SLUICE_AMX void amx_matmul_groups(const WeightView& w, const AmxActivations& xa, int64_t num_tokens, float* y,
                                  int64_t group_begin, int64_t group_end) {
  const Traits tr = traits(w.type);
  const TileConfig cfg = config(tr.halves ? 16 : 32);
  _tile_loadconfig(&cfg);
  const int64_t cols = w.cols;
  const int64_t num_blocks = cols / kSubBlock, scales = cols / block_elements(w.type), sums = cols / 16;
  const int64_t full = num_tokens / kTile * kTile;  // the last partial tile's results go through acc
  const int64_t tiles = xa.tiles;
  // A full group's full token tiles accumulate in y itself; the rest in acc, copied after.
  std::vector<float> acc(tiles * kTile * kRows);
  std::unique_ptr<DecodedChunk<kRows>> decoded;  // 27 KiB: off the stack of pool threads
  const bool packed = w.packed != nullptr && w.packed->tiles();
  // The lean form's unpacking uses AVX-512 VNNI, which every AMX CPU so far has; checked.
  const bool lean = !packed && w.packed != nullptr && w.packed->lean() && kernel_path_runs(KernelPath::kAvx512);
  if (!packed) decoded = std::make_unique<DecodedChunk<kRows>>();
  for (int64_t g = group_begin; g < group_end; ++g) {
    const int64_t n0 = g * kRows;
    const uint8_t* rows[kRows];
    const int64_t num_rows = group_rows(w, g, rows);
    const bool in_y = num_rows == kRows;
    for (int64_t b0 = 0; b0 < num_blocks; b0 += kChunk) {
      const int nb = static_cast<int>(std::min<int64_t>(kChunk, num_blocks - b0));
      AmxChunk chunk;
      if (packed) {
        chunk = w.packed->chunk(g, b0 / kChunk);
      } else {
        if (lean) {
          lean_decode_chunk16(w, g, b0, nb, *decoded);
        } else {
          decode_chunk16(w.type, rows, b0, nb, *decoded);
        }
        chunk = chunk_ref(*decoded);
      }
      for (int64_t tt = 0; tt < tiles; ++tt) {
        const bool padded = tt * kTile >= full;
        const int64_t t0 = tt * kTile;
        const int8_t* x = xa.q.data() + tt * kTile * cols;
        const float* dx = xa.d.data() + tt * kTile * scales;
        const int16_t* s = tr.min ? xa.sums.data() + tt * kTile * sums : nullptr;
        float* out = in_y && !padded ? y + t0 * w.rows + n0 : acc.data() + t0 * kRows;
        tr.run(chunk, b0, nb, x, dx, s, out, in_y && !padded ? w.rows : kRows, b0 == 0);
      }
    }
    const int64_t from = in_y ? full : 0;
    store_group<kRows>(acc.data() + from * kRows, num_tokens - from, num_rows, y + from * w.rows, w.rows, n0);
  }
  _tile_release();
}

}  // namespace sluice::kernels
