// The body of the lean kernels (matmul_lean.cc), included once per instruction set and vector
// form with SLUICE_LEAN_BITS 512 or 256, SLUICE_LEAN_VNNI 1 or 0 and SLUICE_LEAN_PARTS 1 or 0
// (matmul_lean_vec-inl.h): the same code over a row group of 16 on one __m512i (AVX-512 VNNI),
// or with 256-bit vectors (AVX-VNNI, the VEX form, for CPUs without AVX-512; AVX2 without VNNI,
// where vpmaddubsw and vpmaddwd by ones stand in for vpdpbusd) on two __m256i, rows 0-7 and 8-15,
// or on one, a group in two parts of 8 rows (AVX2 only: matmul_lean_avx2.cc). Each under its own
// target attribute, so none leaks into the others or into code that runs everywhere. The lean
// form's layout is the same for all: a 256-bit step reads half of each 64-byte vector. No include
// guard, on purpose.

#if SLUICE_LEAN_BITS == 512 && SLUICE_LEAN_VNNI && !SLUICE_LEAN_PARTS
#define SLUICE_LEAN_NS lean512
#define SLUICE_LEAN_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#elif SLUICE_LEAN_BITS == 256 && SLUICE_LEAN_VNNI && !SLUICE_LEAN_PARTS
#define SLUICE_LEAN_NS lean256
#define SLUICE_LEAN_TARGET __attribute__((target("avxvnni,avx2,fma,f16c")))
#elif SLUICE_LEAN_BITS == 256 && !SLUICE_LEAN_VNNI && SLUICE_LEAN_PARTS
#define SLUICE_LEAN_NS lean_avx2_parts
#define SLUICE_LEAN_TARGET __attribute__((target("avx2,fma,f16c")))
#elif SLUICE_LEAN_BITS == 256 && !SLUICE_LEAN_VNNI
#define SLUICE_LEAN_NS lean_avx2
#define SLUICE_LEAN_TARGET __attribute__((target("avx2,fma,f16c")))
#else
#error "the lean forms: 512 bits with VNNI, 256 with VNNI in pairs, 256 without in pairs or parts"
#endif
#define SLUICE_LEAN_INLINE SLUICE_LEAN_TARGET __attribute__((always_inline)) inline

namespace sluice::kernels {
namespace SLUICE_LEAN_NS {
namespace {

constexpr int kRows = PackedWeight::kRows;

#include "kernels/matmul_lean_vec-inl.h"

// The wide levels, those past 129 as the unsigned bytes the form stores (Q8_0's q + 128, the
// IQ4 tables' values + 128), would saturate vpmaddubsw's pairs: without VNNI they are multiplied
// as the signed levels themselves, |q| times x with q's sign (exact: at most 2 * 128 * 127 a
// pair), and the offset 128 is not taken off after.
constexpr bool kSignedWide = !SLUICE_LEAN_VNNI;
// Two steps of levels up to 64 at a time (dot_pair): without VNNI, one vpmaddwd and one add for
// both; with it, two dependent vpdpbusd, so there the steps go to two accumulators instead.
constexpr bool kPairSteps = !SLUICE_LEAN_VNNI;

// The offset that comes off the integer sums of a type (kBits, kTable) stored with `offset`.
template <int kBits, bool kTable>
constexpr int applied_offset(int offset) {
  return kSignedWide && (kBits == 8 || kTable) ? 0 : offset;
}

// Q8_0's stored levels as the kernels multiply them.
SLUICE_LEAN_INLINE VI wide_levels(VI u) { return kSignedWide ? xor_i(u, splat8(0x80)) : u; }

#if SLUICE_LEAN_VNNI
template <bool kWide>
SLUICE_LEAN_INLINE VI dot_level(VI acc, VI w, VX x) {
  return dot(acc, w, x);
}
#else
// acc + w x for levels w as the type's kernels multiply them (kWide: signed, above).
template <bool kWide>
SLUICE_LEAN_INLINE VI dot_level(VI acc, VI w, VX x) {
  if constexpr (kWide) return dot_signed(acc, w, x);
  return dot(acc, w, x);
}
#endif

// The IQ4 table in every 128-bit lane, as the table's values plus 128 (unsigned: what the
// VNNI lean kernels multiply) or as the signed values themselves (the tile kernels, and the
// lean kernels without VNNI).
SLUICE_LEAN_INLINE VI iq4_table(bool unsigned_levels) {
  alignas(16) int8_t t[16];
  for (int i = 0; i < 16; ++i) t[i] = static_cast<int8_t>(unsigned_levels ? kIq4nlValues[i] + 128 : kIq4nlValues[i]);
  return table16(t);
}

// Vector p of a sub-block's lean levels (v, 64 bytes: step 2p in the low nibbles, 2p + 1 in the
// high ones; kField bits of each nibble: 4, or 3 for Q3_K) unpacked into the two steps' levels,
// and for kTable the indices looked up in table.
template <bool kTable, int kField = 4>
SLUICE_LEAN_INLINE void unpack_lean(VI v, VI table, VI& lo, VI& hi) {
  const VI nib = splat8((1 << kField) - 1);
  lo = and_i(v, nib);
  hi = and_i(srl16(v, 4), nib);
  if constexpr (kTable) {
    lo = lookup(table, lo);
    hi = lookup(table, hi);
  }
}

// Step j's levels of a 2-bit lean vector v (Q2_K: the sub-block's steps 4 (j / 4) .. 4 (j / 4) + 3).
SLUICE_LEAN_INLINE VI unpack_lean2(VI v, int j) { return and_i(srl16(v, 2 * (j % 4)), splat8(3)); }

// Q3_K's lean vector p of a sub-block (lv: its 3 stored vectors): steps 2p and 2p + 1 in bits 0-2
// and 4-6 of each byte; for p = 3 (steps 6 and 7) gathered from bits 3 and 7 of the three (bit k
// of the level from vector k). The 16-bit shifts are safe: each bit kept stays in its byte.
SLUICE_LEAN_INLINE VI lean3_vector(const uint8_t* lv, int p) {
  if (p < 3) return load64(lv + 64 * p);
  const VI t = and_i(srl16(load64(lv), 3), splat8(0x11));
  return or_and(or_and(t, srl16(load64(lv + 64), 2), splat8(0x22)), srl16(load64(lv + 128), 1), splat8(0x44));
}

// Vector `vector` of a sub-block's levels lv, each 16-bit lane shifted right.
SLUICE_LEAN_INLINE VI shifted(const uint8_t* lv, int vector, int shift) {
  return srl16(load64(lv + 64 * vector), shift);
}

// The step j of a sub-block of the types with a level a byte (lv: its kBits stored vectors,
// packed_weight.h), gathered with 16-bit shifts and masks (safe: each bit kept stays in its byte).
// Q5_*: steps 0-4 in bits 0-4 of vector j, steps 5-7 a 15-bit string in bits 5-7 of the five.
// Q6_K: steps 0-5 in bits 0-5 of vector j; step 6 (7): bits 2k, 2k + 1 from bits 6, 7 of
// vector k (3 + k).
template <int kBits>
SLUICE_LEAN_INLINE VI lean_step(const uint8_t* lv, int j) {
  if (j < kBits) return and_i(load64(lv + 64 * j), splat8((1 << kBits) - 1));
  if constexpr (kBits == 6) {
    const int v = 3 * (j - 6);
    const VI t = or_and(and_i(shifted(lv, v, 6), splat8(0x03)), shifted(lv, v + 1, 4), splat8(0x0C));
    return or_and(t, shifted(lv, v + 2, 2), splat8(0x30));
  } else {
    static_assert(kBits == 5);
    if (j == 5) return or_and(and_i(shifted(lv, 0, 5), splat8(0x07)), shifted(lv, 1, 2), splat8(0x18));
    if (j == 6) {
      const VI t = or_and(and_i(shifted(lv, 1, 7), splat8(0x01)), shifted(lv, 2, 4), splat8(0x0E));
      return or_and(t, shifted(lv, 3, 1), splat8(0x10));
    }
    return or_and(and_i(shifted(lv, 3, 6), splat8(0x03)), shifted(lv, 4, 3), splat8(0x1C));
  }
}

// The next group follows in memory: its b-th part (of `part` bytes) is asked for at sub-block b,
// so its lines arrive spread over this group's work (as the avx2 code's direct path does).
SLUICE_LEAN_INLINE void prefetch_part(const uint8_t* next, int64_t b, size_t part, size_t group_bytes) {
  if (next == nullptr) return;
  for (size_t off = b * part; off < std::min(group_bytes, (b + 1) * part); off += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(next + off), _MM_HINT_T0);
  }
}

// A vector's kVecRows results (a group's, or a part's), rows n0 .. of y (fewer at the end).
SLUICE_LEAN_INLINE void store_rows(float* y, int64_t n0, int64_t rows, VF a) {
  const int64_t num_rows = std::min<int64_t>(kVecRows, rows - n0);
  if (num_rows == kVecRows) {
    store16(y + n0, a);
    return;
  }
  alignas(64) float out[kVecRows];
  store16_aligned(out, a);
  std::memcpy(y + n0, out, num_rows * sizeof(float));
}

// Rows part * kVecRows .. of a group's lean form: the same strides, each array's base moved to
// the part's bytes of a vector and its scales. The mins' arrays are empty for a type without
// (kMin false), their pointers only positions: left as they are, never moved past them.
constexpr int kParts = kRows / kVecRows;
template <bool kMin>
SLUICE_LEAN_INLINE PackedWeight::Lean lean_part(PackedWeight::Lean l, int part) {
  const int r = part * kVecRows;
  return {l.levels + r * 4, l.sc + r, kMin ? l.m + r : l.m, l.d + r, kMin ? l.dmin + r : l.dmin};
}

// Where the tokens of a lean tile are: levels, block scales (per 32 or per 256), 16-element sums.
struct LeanTokens {
  const int8_t* x[4];
  const float* dx[4];
  const int16_t* sums[4];
};

// Vector p (v) of sub-block b's lean levels of 4 bits (or 3: kField) times each token's
// activations: the levels of step 2p into acc[t][lo], of step 2p + 1 into acc[t][hi], or both
// into acc[t][lo] (kPairSteps, not for the IQ4 tables' wide levels; the callers count only
// acc[t][lo] + acc[t][hi]).
template <bool kTable, int kT, int kField = 4>
SLUICE_LEAN_INLINE void dot_nibbles(VI v, int p, VI table, const LeanTokens& tk, int64_t b, VI (*acc)[2], int lo,
                                    int hi) {
  VI wl, wh;
  unpack_lean<kTable, kField>(v, table, wl, wh);
  for (int t = 0; t < kT; ++t) {
    const int8_t* xb = tk.x[t] + b * kSubBlock;
    if constexpr (kPairSteps && !kTable) {
      acc[t][lo] = dot_pair(acc[t][lo], wl, xbcast(xb + 8 * p), wh, xbcast(xb + 8 * p + 4));
    } else {
      acc[t][lo] = dot_level<kTable>(acc[t][lo], wl, xbcast(xb + 8 * p));
      acc[t][hi] = dot_level<kTable>(acc[t][hi], wh, xbcast(xb + 8 * p + 4));
    }
  }
}

// Sub-block b's 8 steps of a type with a level a byte (lean_step) times each token's
// activations, step j into acc[t][j / 4] (kByHalf: the 16-element halves the super-block code
// takes the offset off, and scales apart where the type has a scale per 16) or acc[t][j % 2]
// (two chains of dependent vpdpbusd, summed after). Unrolled, so acc[t][...] names registers
// (GCC left this loop rolled on 256 bits with the accumulators in memory, at half the speed).
// kPairSteps: steps 2i and 2i + 1 together into acc[t][i / 2] or acc[t][i % 2].
template <int kBits, bool kByHalf, int kT>
SLUICE_LEAN_INLINE void dot_steps(const uint8_t* lv, const LeanTokens& tk, int64_t b, VI (*acc)[2]) {
  static_assert(kBits <= 6, "dot_pair sums two steps in int16: levels up to 64 only");
  if constexpr (kPairSteps) {
#pragma GCC unroll 4
    for (int j = 0; j < 8; j += 2) {
      const VI l0 = lean_step<kBits>(lv, j), l1 = lean_step<kBits>(lv, j + 1);
      const int k = kByHalf ? j / 4 : j / 2 % 2;
      for (int t = 0; t < kT; ++t) {
        const int8_t* xb = tk.x[t] + b * kSubBlock + 4 * j;
        acc[t][k] = dot_pair(acc[t][k], l0, xbcast(xb), l1, xbcast(xb + 4));
      }
    }
    return;
  }
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) {
    const VI l = lean_step<kBits>(lv, j);
    const int k = kByHalf ? j / 4 : j % 2;
    for (int t = 0; t < kT; ++t) {
      acc[t][k] = dot(acc[t][k], l, xbcast(tk.x[t] + b * kSubBlock + 4 * j));
    }
  }
}

// One row group's (or part's) results for kT tokens (a[t]: its kVecRows rows of token t) from the lean form.
// kBits: 4, 5 or 8; kTable: IQ4_NL (the nibbles index its table). next:
// the following group's bytes, asked for over this group's sub-blocks (nullptr: none).
template <int kBits, bool kTable, bool kMin, int kT>
SLUICE_LEAN_TARGET void lean_group(const PackedWeight::Lean& lean, int64_t num_blocks, int stored_offset,
                                   const LeanTokens& tk, const uint8_t* next, size_t part, size_t group_bytes, VF* a) {
  const VI table = iq4_table(!kSignedWide);
  constexpr int64_t kLevelBytes = 64 * kBits;
  const int offset = applied_offset<kBits, kTable>(stored_offset);
  for (int t = 0; t < kT; ++t) a[t] = zero_f();
  for (int64_t b = 0; b < num_blocks; ++b) {
    prefetch_part(next, b, part, group_bytes);
    const uint8_t* lv = lean.levels + b * kLevelBytes;
    // Two accumulators a token: eight dependent vpdpbusd would wait on each other's latency
    // (without VNNI, Q8_0 and the 4-bit types other than IQ4 use one: the add after vpmaddwd
    // is all that waits on it).
    VI acc[kT][2];
    for (int t = 0; t < kT; ++t) acc[t][0] = acc[t][1] = zero_i();
    if constexpr (kBits == 8) {
      for (int j = 0; j < 8; j += 2) {
        const VI w0 = wide_levels(load64(lv + 64 * j)), w1 = wide_levels(load64(lv + 64 * j + 64));
        for (int t = 0; t < kT; ++t) {
          const int8_t* xb = tk.x[t] + b * kSubBlock;
          acc[t][0] = dot_level<true>(acc[t][0], w0, xbcast(xb + 4 * j));
          acc[t][kSignedWide ? 0 : 1] = dot_level<true>(acc[t][kSignedWide ? 0 : 1], w1, xbcast(xb + 4 * j + 4));
        }
      }
    } else if constexpr (kBits == 5) {
      dot_steps<5, false, kT>(lv, tk, b, acc);
    } else {
      for (int p = 0; p < 4; ++p) dot_nibbles<kTable, kT>(load64(lv + 64 * p), p, table, tk, b, acc, 0, 1);
    }
    const VF d = halves16(lean.d + b * kRows);
    for (int t = 0; t < kT; ++t) {
      const int32_t sx = int32_t{tk.sums[t][2 * b]} + tk.sums[t][2 * b + 1];
      const VI isum = sub_i(add_i(acc[t][0], acc[t][1]), set1_i(offset * sx));
      const VF xs = set1_f(tk.dx[t][b]);
      a[t] = fma_f(mul_f(d, xs), to_f(isum), a[t]);
      if constexpr (kMin) {  // msum = sum(x) (the integer min is 1)
        a[t] = fma_f(mul_f(halves16(lean.dmin + b * kRows), xs), to_f(set1_i(sx)), a[t]);
      }
    }
  }
}

// The super-block types (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS): kBits 2 to 6; kHalves: scales
// (and Q2_K's mins) per 16. Per sub-block the dot product of each half (steps 0..3 are elements
// 0..15: 4-bit vectors 0, 1 and 2, 3; Q3_K's 3-bit vectors 0, 1 and 2, 3 (the gathered one);
// 2-bit vectors 0 and 1; Q5_K's and Q6_K's steps 0-3 and 4-7, dot_steps), scaled by its
// integer scale into the super-block's sum; per super-block the float steps.
template <int kBits, bool kTable, bool kMin, bool kHalves, int kT>
SLUICE_LEAN_TARGET void lean_super_group(const PackedWeight::Lean& lean, int64_t num_blocks, int stored_offset,
                                         const LeanTokens& tk, const uint8_t* next, size_t part, size_t group_bytes,
                                         VF* a) {
  const VI table = iq4_table(!kSignedWide);
  constexpr int64_t kLevelBytes = 64 * kBits;
  const int offset = applied_offset<kBits, kTable>(stored_offset);
  VI isum[kT], msum[kT];
  for (int t = 0; t < kT; ++t) {
    a[t] = zero_f();
    isum[t] = msum[t] = zero_i();
  }
  for (int64_t b = 0; b < num_blocks; ++b) {
    prefetch_part(next, b, part, group_bytes);
    const uint8_t* lv = lean.levels + b * kLevelBytes;
    VI half[kT][2];
    for (int t = 0; t < kT; ++t) half[t][0] = half[t][1] = zero_i();
    if constexpr (kBits == 2) {
      for (int p = 0; p < 2; ++p) {
        const VI v = load64(lv + 64 * p);
        for (int j = 4 * p; j < 4 * p + 4; j += 2) {
          const VI l0 = unpack_lean2(v, j), l1 = unpack_lean2(v, j + 1);
          for (int t = 0; t < kT; ++t) {
            const int8_t* xb = tk.x[t] + b * kSubBlock + 4 * j;
            half[t][p] = dot_pair(half[t][p], l0, xbcast(xb), l1, xbcast(xb + 4));
          }
        }
      }
    } else if constexpr (kBits == 3) {
      for (int p = 0; p < 4; ++p) dot_nibbles<false, kT, 3>(lean3_vector(lv, p), p, table, tk, b, half, p / 2, p / 2);
    } else if constexpr (kBits >= 5) {
      dot_steps<kBits, true, kT>(lv, tk, b, half);
    } else {
      for (int p = 0; p < 4; ++p) dot_nibbles<kTable, kT>(load64(lv + 64 * p), p, table, tk, b, half, p / 2, p / 2);
    }
    const VI sc0 = widen_i8(lean.sc + b * (kHalves ? 32 : 16));
    const VI sc1 = kHalves ? widen_i8(lean.sc + b * 32 + 16) : sc0;
    // Lane r: row r's integer mins of the sub-block's two halves as int16 (Q4_K, Q5_K: the same
    // one twice), against each token's two 16-element sums, adjacent int16 in memory: one
    // vpdpwssd a token gives m0 s0 + m1 s1.
    VI mins = zero_i();
    if constexpr (kMin) {
      const VI m0 = widen_u8(lean.m + b * (kHalves ? 32 : 16));
      mins = pair16(m0, kHalves ? widen_u8(lean.m + b * 32 + 16) : m0);
    }
    for (int t = 0; t < kT; ++t) {
      const int32_t s0 = tk.sums[t][2 * b], s1 = tk.sums[t][2 * b + 1];
      const VI d0 = sub_i(half[t][0], set1_i(offset * s0));
      const VI d1 = sub_i(half[t][1], set1_i(offset * s1));
      if constexpr (kHalves) {
        isum[t] = add_i(isum[t], add_i(mul_i(sc0, d0), mul_i(sc1, d1)));
      } else {
        isum[t] = add_i(isum[t], mul_i(sc0, add_i(d0, d1)));
      }
      if constexpr (kMin) msum[t] = dot16(msum[t], mins, xbcast(reinterpret_cast<const int8_t*>(tk.sums[t] + 2 * b)));
    }
    if ((b + 1) % 8 != 0) continue;
    const int64_t q = b / 8;
    const VF d = halves16(lean.d + q * kRows);
    for (int t = 0; t < kT; ++t) {
      const VF xs = set1_f(tk.dx[t][q]);
      a[t] = fma_f(mul_f(d, xs), to_f(isum[t]), a[t]);
      if constexpr (kMin) a[t] = fma_f(mul_f(halves16(lean.dmin + q * kRows), xs), to_f(msum[t]), a[t]);
      isum[t] = msum[t] = zero_i();
    }
  }
}

// The lean kernels' token tiles, dispatched on the type: kBits, kTable, kMin, kSuper, kHalves.
template <int kBits, bool kTable, bool kMin, bool kSuper, bool kHalves, int kT>
SLUICE_LEAN_INLINE void lean_tile(const PackedWeight::Lean& lean, int64_t num_blocks, int offset, const LeanTokens& tk,
                                  const uint8_t* next, size_t part, size_t group_bytes, VF* a) {
  if constexpr (kSuper) {
    lean_super_group<kBits, kTable, kMin, kHalves, kT>(lean, num_blocks, offset, tk, next, part, group_bytes, a);
  } else {
    lean_group<kBits, kTable, kMin, kT>(lean, num_blocks, offset, tk, next, part, group_bytes, a);
  }
}

// Row groups [group_begin, group_end) for every token, a group at a time: its lean bytes come
// from memory once (the first tile asks for the next group's) and stay in L1 or L2 for the
// other tiles of up to kMaxTile tokens. (Blocks of 16 to 64 tokens over the whole range, to keep
// the activations in L2 as well, measured no better at 64 to 512 tokens on AVX-512.)
template <int kBits, bool kTable, bool kMin, bool kSuper, bool kHalves>
SLUICE_LEAN_TARGET void lean_groups(const PackedWeight& pw, int64_t num_rows_total, int64_t num_blocks, int offset,
                                    const QuantizedActivations& xq, int64_t num_tokens, float* y,
                                    int64_t group_begin, int64_t group_end) {
  // Without VNNI, Q8_0 takes tiles of 4 (one accumulator a token): each weight vector's vpabsb
  // then serves four tokens' vpsignb and vpmaddubsw.
  constexpr int kTileMax = kSignedWide && kBits == 8 ? 4 : kMaxTile;
  const size_t group_bytes = pw.lean_group_bytes();
  const size_t part_bytes = (group_bytes + num_blocks - 1) / num_blocks;
  const int64_t cols = num_blocks * kSubBlock, dx_stride = cols / xq.block, sums_stride = cols / 16;
  for (int64_t g = group_begin; g < group_end; ++g) {
    const PackedWeight::Lean group = pw.lean_group(g);
    const uint8_t* next = g + 1 < group_end ? group.levels + group_bytes : nullptr;
    for (int part = 0; part < kParts; ++part) {
      const int64_t n0 = g * kRows + part * kVecRows;
      if (n0 >= num_rows_total) break;
      const PackedWeight::Lean lean = lean_part<kMin>(group, part);
      for (int64_t t0 = 0; t0 < num_tokens;) {
        const int64_t left = num_tokens - t0;
        const int kt = left >= 4 && kTileMax >= 4 ? 4 : left >= 2 ? 2 : 1;
        LeanTokens tk{};
        for (int t = 0; t < kt; ++t) {
          tk.x[t] = xq.q.data() + (t0 + t) * cols;
          tk.dx[t] = xq.d.data() + (t0 + t) * dx_stride;
          tk.sums[t] = xq.sums.empty() ? nullptr : xq.sums.data() + (t0 + t) * sums_stride;
        }
        VF a[4];
        const uint8_t* pre = t0 == 0 && part == 0 ? next : nullptr;
        if constexpr (kTileMax >= 4) {
          if (kt == 4) lean_tile<kBits, kTable, kMin, kSuper, kHalves, 4>(lean, num_blocks, offset, tk, pre, part_bytes, group_bytes, a);
        }
        if (kt == 2) {
          lean_tile<kBits, kTable, kMin, kSuper, kHalves, 2>(lean, num_blocks, offset, tk, pre, part_bytes, group_bytes, a);
        } else if (kt == 1) {
          lean_tile<kBits, kTable, kMin, kSuper, kHalves, 1>(lean, num_blocks, offset, tk, pre, part_bytes, group_bytes, a);
        }
        for (int t = 0; t < kt; ++t) store_rows(y + (t0 + t) * num_rows_total, n0, num_rows_total, a[t]);
        t0 += kt;
      }
    }
  }
}

#if SLUICE_LEAN_BITS == 512
// Sub-blocks [b0, b0 + nb) of row group g decoded from the lean form into the tile kernels'
// chunk: the levels are already transposed, so this is unpacking (q = u - offset), widening the
// integer scales and converting the halves, the same values decode_chunk16 gives.
template <int kBits, bool kTable, bool kMin, bool kSuper, bool kHalves>
SLUICE_LEAN_TARGET void lean_chunk(const PackedWeight& pw, int64_t g, int64_t b0, int nb, int offset,
                                   DecodedChunk<kRows>& c) {
  const PackedWeight::Lean lean = pw.lean_group(g);
  const __m512i off8 = _mm512_set1_epi8(static_cast<char>(offset)), ones = _mm512_set1_epi32(1);
  const __m512i table = iq4_table(false);  // the indices give the table's signed values directly
  for (int i = 0; i < nb; ++i) {
    const int64_t b = b0 + i;
    if constexpr (kBits == 2) {
      const uint8_t* lv = lean.levels + b * 128;
      for (int j = 0; j < 8; ++j) {
        const __m512i l = unpack_lean2(_mm512_load_si512(lv + 64 * (j / 4)), j);
        _mm512_store_si512(c.w[i][j], _mm512_sub_epi8(l, off8));
      }
    } else if constexpr (kBits == 3) {
      const uint8_t* lv = lean.levels + b * 192;
      for (int p = 0; p < 4; ++p) {
        __m512i lo, hi;
        unpack_lean<false, 3>(lean3_vector(lv, p), table, lo, hi);
        _mm512_store_si512(c.w[i][2 * p], _mm512_sub_epi8(lo, off8));
        _mm512_store_si512(c.w[i][2 * p + 1], _mm512_sub_epi8(hi, off8));
      }
    } else if constexpr (kBits == 5 || kBits == 6) {
      const uint8_t* lv = lean.levels + b * 64 * kBits;
      for (int j = 0; j < 8; ++j) _mm512_store_si512(c.w[i][j], _mm512_sub_epi8(lean_step<kBits>(lv, j), off8));
    } else if constexpr (kBits == 8) {
      const uint8_t* lv = lean.levels + b * 512;
      for (int j = 0; j < 8; ++j) {
        _mm512_store_si512(c.w[i][j], _mm512_xor_si512(_mm512_load_si512(lv + 64 * j), _mm512_set1_epi8(-128)));
      }
    } else {
      const uint8_t* lv = lean.levels + b * 256;
      for (int p = 0; p < 4; ++p) {
        __m512i lo, hi;
        unpack_lean<kTable>(_mm512_load_si512(lv + 64 * p), table, lo, hi);
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


// Sub-blocks [b0, b0 + nb) of row group g decoded from the lean form (matmul_lean.h).
void decode_chunk16(const WeightView& w, int64_t g, int64_t b0, int nb, DecodedChunk<16>& c) {
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
#endif

// Rows of groups [group_begin, group_end) of y = x W^T from the lean form of w.packed; false
// where this form does not compute w.type: the parts form computes only the types it was
// measured faster for on AVX2 (matmul_lean_avx2.cc), so only those are compiled in it.
bool matmul(const WeightView& w, const QuantizedActivations& xq, int64_t num_tokens, float* y,
            int64_t group_begin, int64_t group_end) {
  using T = gguf::TensorType;
  const PackedWeight& pw = *w.packed;
  const int64_t nb = w.cols / kSubBlock;
  const int off = PackedWeight::lean_offset(w.type);
  const auto run = [&](auto fn) {
    fn(pw, w.rows, nb, off, xq, num_tokens, y, group_begin, group_end);
    return true;
  };
  switch (w.type) {
#if !SLUICE_LEAN_PARTS
    case T::kQ4_0: return run(lean_groups<4, false, false, false, false>);
    case T::kQ4_1: return run(lean_groups<4, false, true, false, false>);
    case T::kIQ4_NL: return run(lean_groups<4, true, false, false, false>);
    case T::kQ5_0: return run(lean_groups<5, false, false, false, false>);
    case T::kQ5_1: return run(lean_groups<5, false, true, false, false>);
    case T::kQ8_0: return run(lean_groups<8, false, false, false, false>);
    case T::kQ3_K: return run(lean_groups<3, false, false, true, true>);
#endif
    case T::kQ2_K: return run(lean_groups<2, false, true, true, true>);
    case T::kQ4_K: return run(lean_groups<4, false, true, true, false>);
    case T::kQ5_K: return run(lean_groups<5, false, true, true, false>);
    case T::kQ6_K: return run(lean_groups<6, false, false, true, true>);
    case T::kIQ4_XS: return run(lean_groups<4, true, false, true, false>);
    default: return false;
  }
}

}  // namespace
}  // namespace SLUICE_LEAN_NS
}  // namespace sluice::kernels

#undef SLUICE_LEAN_NS
#undef SLUICE_LEAN_TARGET
#undef SLUICE_LEAN_INLINE
