// The kernels of the lean form (packed_weight.h) on AVX-512 VNNI: the quantized matmul for any
// number of tokens straight from the repacked levels, and the decoding of a chunk of them for the
// tile kernels. The same integers and float steps as matmul_quant.cc (read its header first), so
// the same bits as every other path.
//
// The form holds each row group's levels transposed for vpdpbusd (lane r of a step: row r's four
// levels) as unsigned bytes u = q + offset, in about the file's bytes: a step's vector comes from
// one load and at most a mask, shift and OR per bit plane, never a transpose. The activations are
// the signed operand (x, quantized per 32 or 256 with the sums of each 16); the offset comes off
// exactly per 16-element half as offset * sum(x). A row group's bytes stream from memory once
// (the next group's are asked for over this one's sub-blocks) and stay in L1 or L2 while tiles of
// up to four tokens run over them, each token with accumulators of its own: a weight vector,
// unpacked once, feeds one vpdpbusd per token. Measured on the avx512 path (README), this beats
// the tile form (1.1 to 1.75 bytes a weight, decoded already) at every token count up to 512, so
// that path keeps the lean form only; the amx path still reads tiles from 8 tokens on.
#include "kernels/matmul_lean.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/packed_weight.h"
#include "kernels/quant_blocks.h"

#define SLUICE_LEAN_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#define SLUICE_LEAN_INLINE SLUICE_LEAN_TARGET __attribute__((always_inline)) inline

namespace sluice::kernels {
namespace {

constexpr int kRows = PackedWeight::kRows;

// The masked form: GCC 12's plain one reads an undefined vector, which -Wmaybe-uninitialized flags.
SLUICE_LEAN_INLINE __m512 to_f(__m512i v) { return _mm512_maskz_cvtepi32_ps(static_cast<__mmask16>(0xFFFF), v); }


// 16 halves as floats (the masked form, as to_f).
SLUICE_LEAN_INLINE __m512 halves16(const uint16_t* p) {
  return _mm512_maskz_cvtph_ps(static_cast<__mmask16>(0xFFFF), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// 16 bytes widened to int32 lanes, signed or unsigned (masked forms, as to_f).
SLUICE_LEAN_INLINE __m512i widen_i8(const int8_t* p) {
  return _mm512_maskz_cvtepi8_epi32(static_cast<__mmask16>(0xFFFF), _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
SLUICE_LEAN_INLINE __m512i widen_u8(const uint8_t* p) {
  return _mm512_maskz_cvtepu8_epi32(static_cast<__mmask16>(0xFFFF), _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

SLUICE_LEAN_INLINE __m512i xbcast(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// The IQ4 table in every 128-bit lane, as the table's values plus 128 (unsigned: what the
// lean kernels multiply) or as the signed values themselves (what the tile kernels want).
SLUICE_LEAN_INLINE __m512i iq4_table(bool unsigned_levels) {
  alignas(16) int8_t t[16];
  for (int i = 0; i < 16; ++i) t[i] = static_cast<int8_t>(unsigned_levels ? kIq4nlValues[i] + 128 : kIq4nlValues[i]);
  return _mm512_maskz_broadcast_i32x4(static_cast<__mmask16>(0xFFFF), _mm_load_si128(reinterpret_cast<const __m128i*>(t)));
}

// Vector p of a sub-block's lean levels (v, 64 bytes: step 2p in the low nibbles, 2p + 1 in the
// high ones) unpacked into the two steps' levels: bit planes above 4 from high (the sub-block's
// kPlanes planes of 64 bytes), and for kTable the indices looked up in table.
template <int kPlanes, bool kTable>
SLUICE_LEAN_INLINE void unpack_lean(__m512i v, const uint8_t* high, int p, __m512i table, __m512i& lo, __m512i& hi) {
  const __m512i nib = _mm512_set1_epi8(15);
  lo = _mm512_and_si512(v, nib);
  hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
  for (int plane = 0; plane < kPlanes; ++plane) {
    __mmask64 m0, m1;
    std::memcpy(&m0, high + 64 * plane + 16 * p, 8);
    std::memcpy(&m1, high + 64 * plane + 16 * p + 8, 8);
    const __m512i bit = _mm512_set1_epi8(static_cast<char>(16 << plane));
    lo = _mm512_or_si512(lo, _mm512_maskz_mov_epi8(m0, bit));
    hi = _mm512_or_si512(hi, _mm512_maskz_mov_epi8(m1, bit));
  }
  if constexpr (kTable) {
    lo = _mm512_shuffle_epi8(table, lo);
    hi = _mm512_shuffle_epi8(table, hi);
  }
}

// Step j's levels of a 2-bit lean vector v (the sub-block's steps 4 (j / 4) .. 4 (j / 4) + 3),
// with kPlanes bit planes above 2 from high (Q3_K: its third bit).
template <int kPlanes>
SLUICE_LEAN_INLINE __m512i unpack_lean2(__m512i v, const uint8_t* high, int j) {
  __m512i l = _mm512_and_si512(_mm512_srli_epi16(v, 2 * (j % 4)), _mm512_set1_epi8(3));
  for (int plane = 0; plane < kPlanes; ++plane) {
    __mmask64 m;
    std::memcpy(&m, high + 64 * plane + 8 * j, 8);
    l = _mm512_or_si512(l, _mm512_maskz_mov_epi8(m, _mm512_set1_epi8(static_cast<char>(4 << plane))));
  }
  return l;
}

// The next group follows in memory: its b-th part (of `part` bytes) is asked for at sub-block b,
// so its lines arrive spread over this group's work (as the avx2 code's direct path does).
SLUICE_LEAN_INLINE void prefetch_part(const uint8_t* next, int64_t b, size_t part, size_t group_bytes) {
  if (next == nullptr) return;
  for (size_t off = b * part; off < std::min(group_bytes, (b + 1) * part); off += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(next + off), _MM_HINT_T0);
  }
}

// A group's 16 results into y (fewer in a last partial group).
SLUICE_LEAN_INLINE void store_group16(float* y, int64_t g, int64_t rows, __m512 a) {
  const int64_t n0 = g * kRows, num_rows = std::min<int64_t>(kRows, rows - n0);
  if (num_rows == kRows) {
    _mm512_storeu_ps(y + n0, a);
    return;
  }
  alignas(64) float out[kRows];
  _mm512_store_ps(out, a);
  std::memcpy(y + n0, out, num_rows * sizeof(float));
}

// Where the tokens of a lean tile are: levels, block scales (per 32 or per 256), 16-element sums.
constexpr int kLeanTile = 4;
struct LeanTokens {
  const int8_t* x[kLeanTile];
  const float* dx[kLeanTile];
  const int16_t* sums[kLeanTile];
};

// Vector p of sub-block b's lean levels of 4 bits (kPlanes planes above them in high) times each
// token's activations: the levels of step 2p into acc[t][lo], of step 2p + 1 into acc[t][hi].
template <int kPlanes, bool kTable, int kT>
SLUICE_LEAN_INLINE void dot_nibbles(const uint8_t* lv, const uint8_t* high, int p, __m512i table, const LeanTokens& tk,
                                    int64_t b, __m512i (*acc)[2], int lo, int hi) {
  __m512i wl, wh;
  unpack_lean<kPlanes, kTable>(_mm512_load_si512(lv + 64 * p), high, p, table, wl, wh);
  for (int t = 0; t < kT; ++t) {
    const int8_t* xb = tk.x[t] + b * kSubBlock;
    acc[t][lo] = _mm512_dpbusd_epi32(acc[t][lo], wl, xbcast(xb + 8 * p));
    acc[t][hi] = _mm512_dpbusd_epi32(acc[t][hi], wh, xbcast(xb + 8 * p + 4));
  }
}

// One row group's results for kT tokens (a[t]: the 16 rows of token t) from the lean form.
// kBits: 4, 5 or 8; kTable: IQ4_NL (the nibbles index its table, stored as value + 128). next:
// the following group's bytes, asked for over this group's sub-blocks (nullptr: none).
template <int kBits, bool kTable, bool kMin, int kT>
SLUICE_LEAN_TARGET void lean_group(const PackedWeight::Lean& lean, int64_t num_blocks, int offset, const LeanTokens& tk,
                                   const uint8_t* next, size_t part, size_t group_bytes, __m512* a) {
  const __m512i table = iq4_table(true);
  constexpr int64_t kLevelBytes = kBits == 8 ? 512 : 256;
  constexpr int kPlanes = kBits == 5 ? 1 : 0;
  for (int t = 0; t < kT; ++t) a[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < num_blocks; ++b) {
    prefetch_part(next, b, part, group_bytes);
    const uint8_t* lv = lean.levels + b * kLevelBytes;
    // Two accumulators a token: eight dependent vpdpbusd would wait on each other's latency.
    __m512i acc[kT][2];
    for (int t = 0; t < kT; ++t) acc[t][0] = acc[t][1] = _mm512_setzero_si512();
    if constexpr (kBits == 8) {
      for (int j = 0; j < 8; j += 2) {
        const __m512i w0 = _mm512_load_si512(lv + 64 * j), w1 = _mm512_load_si512(lv + 64 * j + 64);
        for (int t = 0; t < kT; ++t) {
          const int8_t* xb = tk.x[t] + b * kSubBlock;
          acc[t][0] = _mm512_dpbusd_epi32(acc[t][0], w0, xbcast(xb + 4 * j));
          acc[t][1] = _mm512_dpbusd_epi32(acc[t][1], w1, xbcast(xb + 4 * j + 4));
        }
      }
    } else {
      for (int p = 0; p < 4; ++p) dot_nibbles<kPlanes, kTable, kT>(lv, lean.high + b * 64 * kPlanes, p, table, tk, b, acc, 0, 1);
    }
    const __m512 d = halves16(lean.d + b * kRows);
    for (int t = 0; t < kT; ++t) {
      const int32_t sx = int32_t{tk.sums[t][2 * b]} + tk.sums[t][2 * b + 1];
      const __m512i isum = _mm512_sub_epi32(_mm512_add_epi32(acc[t][0], acc[t][1]), _mm512_set1_epi32(offset * sx));
      const __m512 xs = _mm512_set1_ps(tk.dx[t][b]);
      a[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, xs), to_f(isum), a[t]);
      if constexpr (kMin) {  // msum = sum(x) (the integer min is 1)
        a[t] = _mm512_fmadd_ps(_mm512_mul_ps(halves16(lean.dmin + b * kRows), xs), to_f(_mm512_set1_epi32(sx)), a[t]);
      }
    }
  }
}

// The super-block types (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS): kBits 2 to 6; kHalves: scales
// (and Q2_K's mins) per 16. Per sub-block the dot product of each half (steps 0..3 are elements
// 0..15: 4-bit vectors 0, 1 and 2, 3; 2-bit vectors 0 and 1), scaled by its integer scale into
// the super-block's sum; per super-block the float steps.
template <int kBits, bool kTable, bool kMin, bool kHalves, int kT>
SLUICE_LEAN_TARGET void lean_super_group(const PackedWeight::Lean& lean, int64_t num_blocks, int offset,
                                         const LeanTokens& tk, const uint8_t* next, size_t part, size_t group_bytes,
                                         __m512* a) {
  const __m512i table = iq4_table(true);
  constexpr bool kTwoBit = kBits <= 3;
  constexpr int kPlanes = kTwoBit ? kBits - 2 : kBits - 4;
  constexpr int64_t kLevelBytes = kTwoBit ? 128 : 256;
  __m512i isum[kT], msum[kT];
  for (int t = 0; t < kT; ++t) {
    a[t] = _mm512_setzero_ps();
    isum[t] = msum[t] = _mm512_setzero_si512();
  }
  for (int64_t b = 0; b < num_blocks; ++b) {
    prefetch_part(next, b, part, group_bytes);
    const uint8_t* lv = lean.levels + b * kLevelBytes;
    __m512i half[kT][2];
    for (int t = 0; t < kT; ++t) half[t][0] = half[t][1] = _mm512_setzero_si512();
    if constexpr (kTwoBit) {
      for (int p = 0; p < 2; ++p) {
        const __m512i v = _mm512_load_si512(lv + 64 * p);
        for (int j = 4 * p; j < 4 * p + 4; ++j) {
          const __m512i l = unpack_lean2<kPlanes>(v, lean.high + b * 64 * kPlanes, j);
          for (int t = 0; t < kT; ++t) half[t][p] = _mm512_dpbusd_epi32(half[t][p], l, xbcast(tk.x[t] + b * kSubBlock + 4 * j));
        }
      }
    } else {
      for (int p = 0; p < 4; ++p) {
        dot_nibbles<kPlanes, kTable, kT>(lv, lean.high + b * 64 * kPlanes, p, table, tk, b, half, p / 2, p / 2);
      }
    }
    const __m512i sc0 = widen_i8(lean.sc + b * (kHalves ? 32 : 16));
    const __m512i sc1 = kHalves ? widen_i8(lean.sc + b * 32 + 16) : sc0;
    __m512i m0 = _mm512_setzero_si512(), m1 = m0;
    if constexpr (kMin) {
      m0 = widen_u8(lean.m + b * (kHalves ? 32 : 16));
      m1 = kHalves ? widen_u8(lean.m + b * 32 + 16) : m0;
    }
    for (int t = 0; t < kT; ++t) {
      const int32_t s0 = tk.sums[t][2 * b], s1 = tk.sums[t][2 * b + 1];
      const __m512i d0 = _mm512_sub_epi32(half[t][0], _mm512_set1_epi32(offset * s0));
      const __m512i d1 = _mm512_sub_epi32(half[t][1], _mm512_set1_epi32(offset * s1));
      if constexpr (kHalves) {
        isum[t] = _mm512_add_epi32(isum[t], _mm512_add_epi32(_mm512_mullo_epi32(sc0, d0), _mm512_mullo_epi32(sc1, d1)));
      } else {
        isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(sc0, _mm512_add_epi32(d0, d1)));
      }
      if constexpr (kMin && kHalves) {
        msum[t] = _mm512_add_epi32(msum[t], _mm512_add_epi32(_mm512_mullo_epi32(m0, _mm512_set1_epi32(s0)),
                                                             _mm512_mullo_epi32(m1, _mm512_set1_epi32(s1))));
      } else if constexpr (kMin) {
        msum[t] = _mm512_add_epi32(msum[t], _mm512_mullo_epi32(m0, _mm512_set1_epi32(s0 + s1)));
      }
    }
    if ((b + 1) % 8 != 0) continue;
    const int64_t q = b / 8;
    const __m512 d = halves16(lean.d + q * kRows);
    for (int t = 0; t < kT; ++t) {
      const __m512 xs = _mm512_set1_ps(tk.dx[t][q]);
      a[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, xs), to_f(isum[t]), a[t]);
      if constexpr (kMin) a[t] = _mm512_fmadd_ps(_mm512_mul_ps(halves16(lean.dmin + q * kRows), xs), to_f(msum[t]), a[t]);
      isum[t] = msum[t] = _mm512_setzero_si512();
    }
  }
}

// The lean kernels' token tiles, dispatched on the type: kBits, kTable, kMin, kSuper, kHalves.
template <int kBits, bool kTable, bool kMin, bool kSuper, bool kHalves, int kT>
SLUICE_LEAN_INLINE void lean_tile(const PackedWeight::Lean& lean, int64_t num_blocks, int offset, const LeanTokens& tk,
                                  const uint8_t* next, size_t part, size_t group_bytes, __m512* a) {
  if constexpr (kSuper) {
    lean_super_group<kBits, kTable, kMin, kHalves, kT>(lean, num_blocks, offset, tk, next, part, group_bytes, a);
  } else {
    lean_group<kBits, kTable, kMin, kT>(lean, num_blocks, offset, tk, next, part, group_bytes, a);
  }
}

// Row groups [group_begin, group_end) for every token, a group at a time: its lean bytes come
// from memory once (the first tile asks for the next group's) and stay in L1 or L2 for the
// other tiles of up to kLeanTile tokens. (Blocks of 16 to 64 tokens over the whole range, to keep
// the activations in L2 as well, measured no better at 64 to 512 tokens.)
template <int kBits, bool kTable, bool kMin, bool kSuper, bool kHalves>
SLUICE_LEAN_TARGET void lean_groups(const PackedWeight& pw, int64_t num_rows_total, int64_t num_blocks, int offset,
                                    const QuantizedActivations& xq, int64_t num_tokens, float* y,
                                    int64_t group_begin, int64_t group_end) {
  const size_t group_bytes = pw.lean_group_bytes();
  const size_t part = (group_bytes + num_blocks - 1) / num_blocks;
  const int64_t cols = num_blocks * kSubBlock, dx_stride = cols / xq.block, sums_stride = cols / 16;
  for (int64_t g = group_begin; g < group_end; ++g) {
    const PackedWeight::Lean lean = pw.lean_group(g);
    const uint8_t* next = g + 1 < group_end ? lean.levels + group_bytes : nullptr;
    for (int64_t t0 = 0; t0 < num_tokens;) {
      const int64_t left = num_tokens - t0;
      const int kt = left >= 4 ? 4 : left >= 2 ? 2 : 1;
      LeanTokens tk{};
      for (int t = 0; t < kt; ++t) {
        tk.x[t] = xq.q.data() + (t0 + t) * cols;
        tk.dx[t] = xq.d.data() + (t0 + t) * dx_stride;
        tk.sums[t] = xq.sums.data() + (t0 + t) * sums_stride;
      }
      __m512 a[kLeanTile];
      const uint8_t* pre = t0 == 0 ? next : nullptr;
      if (kt == 4) {
        lean_tile<kBits, kTable, kMin, kSuper, kHalves, 4>(lean, num_blocks, offset, tk, pre, part, group_bytes, a);
      } else if (kt == 2) {
        lean_tile<kBits, kTable, kMin, kSuper, kHalves, 2>(lean, num_blocks, offset, tk, pre, part, group_bytes, a);
      } else {
        lean_tile<kBits, kTable, kMin, kSuper, kHalves, 1>(lean, num_blocks, offset, tk, pre, part, group_bytes, a);
      }
      for (int t = 0; t < kt; ++t) store_group16(y + (t0 + t) * num_rows_total, g, num_rows_total, a[t]);
      t0 += kt;
    }
  }
}

// Sub-blocks [b0, b0 + nb) of row group g decoded from the lean form into the tile kernels'
// chunk: the levels are already transposed, so this is unpacking (q = u - offset), widening the
// integer scales and converting the halves, the same values decode_chunk16 gives.
template <int kBits, bool kTable, bool kMin, bool kSuper, bool kHalves>
SLUICE_LEAN_TARGET void lean_chunk(const PackedWeight& pw, int64_t g, int64_t b0, int nb, int offset,
                                   DecodedChunk<kRows>& c) {
  const PackedWeight::Lean lean = pw.lean_group(g);
  const __m512i off8 = _mm512_set1_epi8(static_cast<char>(offset)), ones = _mm512_set1_epi32(1);
  const __m512i table = iq4_table(false);  // the indices give the table's signed values directly
  constexpr bool kTwoBit = kBits <= 3;
  constexpr int kPlanes = kBits == 8 ? 0 : kTwoBit ? kBits - 2 : kBits - 4;
  for (int i = 0; i < nb; ++i) {
    const int64_t b = b0 + i;
    if constexpr (kTwoBit) {
      const uint8_t* lv = lean.levels + b * 128;
      for (int j = 0; j < 8; ++j) {
        const __m512i l = unpack_lean2<kPlanes>(_mm512_load_si512(lv + 64 * (j / 4)), lean.high + b * 64 * kPlanes, j);
        _mm512_store_si512(c.w[i][j], _mm512_sub_epi8(l, off8));
      }
    } else if constexpr (kBits == 8) {
      const uint8_t* lv = lean.levels + b * 512;
      for (int j = 0; j < 8; ++j) {
        _mm512_store_si512(c.w[i][j], _mm512_xor_si512(_mm512_load_si512(lv + 64 * j), _mm512_set1_epi8(-128)));
      }
    } else {
      const uint8_t* lv = lean.levels + b * 256;
      for (int p = 0; p < 4; ++p) {
        __m512i lo, hi;
        unpack_lean<kPlanes, kTable>(_mm512_load_si512(lv + 64 * p), lean.high + b * 64 * kPlanes, p, table, lo, hi);
        if constexpr (!kTable) {
          lo = _mm512_sub_epi8(lo, off8);
          hi = _mm512_sub_epi8(hi, off8);
        }
        _mm512_store_si512(c.w[i][2 * p], lo);
        _mm512_store_si512(c.w[i][2 * p + 1], hi);
      }
    }
    if constexpr (kSuper) {
      const __m512i sc0 = kHalves ? widen_i8(lean.sc + b * 32) : widen_i8(lean.sc + b * 16);
      const __m512i sc1 = kHalves ? widen_i8(lean.sc + b * 32 + 16) : sc0;
      _mm512_store_si512(c.sc[i][0], sc0);
      _mm512_store_si512(c.sc[i][1], sc1);
    } else {
      _mm512_store_si512(c.sc[i][0], ones);
      _mm512_store_si512(c.sc[i][1], ones);
    }
    if constexpr (kMin && kHalves) {  // Q2_K: a min per 16
      _mm512_store_si512(c.m[i][0], widen_u8(lean.m + b * 32));
      _mm512_store_si512(c.m[i][1], widen_u8(lean.m + b * 32 + 16));
    } else {
      const __m512i m = !kMin ? _mm512_setzero_si512() : kSuper ? widen_u8(lean.m + b * 16) : ones;
      _mm512_store_si512(c.m[i][0], m);
      _mm512_store_si512(c.m[i][1], m);
    }
    const int64_t block = kSuper ? b / 8 : b;
    _mm512_store_ps(c.d[i], halves16(lean.d + block * kRows));
    _mm512_store_ps(c.dmin[i], kMin ? halves16(lean.dmin + block * kRows) : _mm512_setzero_ps());
  }
}

}  // namespace

void lean_decode_chunk16(const WeightView& w, int64_t g, int64_t b0, int nb, DecodedChunk<16>& c) {
  using T = gguf::TensorType;
  const PackedWeight& pw = *w.packed;
  const int off = PackedWeight::lean_offset(w.type);
  switch (w.type) {
    case T::kQ4_0: return lean_chunk<4, false, false, false, false>(pw, g, b0, nb, off, c);
    case T::kQ4_1: return lean_chunk<4, false, true, false, false>(pw, g, b0, nb, off, c);
    case T::kIQ4_NL: return lean_chunk<4, true, false, false, false>(pw, g, b0, nb, off, c);
    case T::kQ5_0: return lean_chunk<5, false, false, false, false>(pw, g, b0, nb, off, c);
    case T::kQ5_1: return lean_chunk<5, false, true, false, false>(pw, g, b0, nb, off, c);
    case T::kQ8_0: return lean_chunk<8, false, false, false, false>(pw, g, b0, nb, off, c);
    case T::kQ2_K: return lean_chunk<2, false, true, true, true>(pw, g, b0, nb, off, c);
    case T::kQ3_K: return lean_chunk<3, false, false, true, true>(pw, g, b0, nb, off, c);
    case T::kQ4_K: return lean_chunk<4, false, true, true, false>(pw, g, b0, nb, off, c);
    case T::kQ5_K: return lean_chunk<5, false, true, true, false>(pw, g, b0, nb, off, c);
    case T::kQ6_K: return lean_chunk<6, false, false, true, true>(pw, g, b0, nb, off, c);
    case T::kIQ4_XS: return lean_chunk<4, true, false, true, false>(pw, g, b0, nb, off, c);
    default: return;
  }
}

void lean_matmul(const WeightView& w, const QuantizedActivations& xq, int64_t num_tokens, float* y, int64_t group_begin,
                 int64_t group_end) {
  using T = gguf::TensorType;
  const PackedWeight& pw = *w.packed;
  const int64_t nb = w.cols / kSubBlock;
  const int off = PackedWeight::lean_offset(w.type);
  const auto run = [&](auto fn) { fn(pw, w.rows, nb, off, xq, num_tokens, y, group_begin, group_end); };
  switch (w.type) {
    case T::kQ4_0: return run(lean_groups<4, false, false, false, false>);
    case T::kQ4_1: return run(lean_groups<4, false, true, false, false>);
    case T::kIQ4_NL: return run(lean_groups<4, true, false, false, false>);
    case T::kQ5_0: return run(lean_groups<5, false, false, false, false>);
    case T::kQ5_1: return run(lean_groups<5, false, true, false, false>);
    case T::kQ8_0: return run(lean_groups<8, false, false, false, false>);
    case T::kQ2_K: return run(lean_groups<2, false, true, true, true>);
    case T::kQ3_K: return run(lean_groups<3, false, false, true, true>);
    case T::kQ4_K: return run(lean_groups<4, false, true, true, false>);
    case T::kQ5_K: return run(lean_groups<5, false, true, true, false>);
    case T::kQ6_K: return run(lean_groups<6, false, false, true, true>);
    case T::kIQ4_XS: return run(lean_groups<4, true, false, true, false>);
    default: return;
  }
}

}  // namespace sluice::kernels
