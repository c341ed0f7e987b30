// The body of the VNNI kernels (matmul_vnni.cc), included once per vector width with
// SLUICE_VNNI_BITS 512 or 256: the same code on __m512i (AVX-512 VNNI, 16 rows) and on __m256i
// (AVX-VNNI, 8 rows), each under its own target attribute so neither leaks into the other or
// into code that runs everywhere. No include guard, on purpose.

#if SLUICE_VNNI_BITS == 512
#define SLUICE_VNNI_NS vnni512
#define SLUICE_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#elif SLUICE_VNNI_BITS == 256
#define SLUICE_VNNI_NS vnni256
#define SLUICE_VNNI_TARGET __attribute__((target("avxvnni,avx2,fma,f16c")))
#else
#error "SLUICE_VNNI_BITS must be 512 or 256"
#endif
#define SLUICE_VNNI_INLINE SLUICE_VNNI_TARGET __attribute__((always_inline)) inline

namespace sluice::kernels {
namespace SLUICE_VNNI_NS {
namespace {

#if SLUICE_VNNI_BITS == 512
constexpr int kRows = kVnni512GroupRows;
using VI = __m512i;
using VF = __m512;
SLUICE_VNNI_INLINE VI zero_i() { return _mm512_setzero_si512(); }
SLUICE_VNNI_INLINE VI load_i(const void* p) { return _mm512_load_si512(p); }
SLUICE_VNNI_INLINE VI set1_i(int32_t v) { return _mm512_set1_epi32(v); }
SLUICE_VNNI_INLINE VI add_i(VI a, VI b) { return _mm512_add_epi32(a, b); }
SLUICE_VNNI_INLINE VI sub_i(VI a, VI b) { return _mm512_sub_epi32(a, b); }
SLUICE_VNNI_INLINE VI mul_i(VI a, VI b) { return _mm512_mullo_epi32(a, b); }
SLUICE_VNNI_INLINE VI shl7(VI a) { return _mm512_maskz_slli_epi32(static_cast<__mmask16>(0xFFFF), a, 7); }
SLUICE_VNNI_INLINE VI dot(VI acc, VI u, VI s) { return _mm512_dpbusd_epi32(acc, u, s); }
SLUICE_VNNI_INLINE VF load_f(const float* p) { return _mm512_load_ps(p); }
SLUICE_VNNI_INLINE VF loadu_f(const float* p) { return _mm512_loadu_ps(p); }
SLUICE_VNNI_INLINE void storeu_f(float* p, VF v) { _mm512_storeu_ps(p, v); }
SLUICE_VNNI_INLINE VF set1_f(float v) { return _mm512_set1_ps(v); }
SLUICE_VNNI_INLINE VF mul_f(VF a, VF b) { return _mm512_mul_ps(a, b); }
SLUICE_VNNI_INLINE VF fma_f(VF a, VF b, VF c) { return _mm512_fmadd_ps(a, b, c); }
// The masked forms (shl7, to_f): GCC 12's plain ones read an undefined vector, which
// -Wmaybe-uninitialized flags.
SLUICE_VNNI_INLINE VF to_f(VI v) { return _mm512_maskz_cvtepi32_ps(static_cast<__mmask16>(0xFFFF), v); }
}  // namespace
void lean_decode_chunk(const WeightView& w, int64_t g, int64_t b0, int nb, DecodedChunk<kRows>& c);  // below
namespace {
// From the lean form where the weight has it, else from the file's blocks.
inline void decode(const WeightView& w, int64_t g, const uint8_t* const* rows, int64_t b0, int nb,
                   DecodedChunk<kRows>& c) {
  if (w.packed != nullptr && w.packed->lean()) return lean_decode_chunk(w, g, b0, nb, c);
  decode_chunk16(w.type, rows, b0, nb, c);
}
// The 16-row kernel reads a packed weight in place; otherwise each chunk is decoded.
inline bool reads_packed(const WeightView& w) { return w.packed != nullptr && w.packed->tiles(); }
inline ChunkRef<kRows> packed_chunk(const WeightView& w, int64_t g, int64_t k) { return w.packed->chunk(g, k); }
#else
constexpr int kRows = kVnni256GroupRows;
using VI = __m256i;
using VF = __m256;
SLUICE_VNNI_INLINE VI zero_i() { return _mm256_setzero_si256(); }
SLUICE_VNNI_INLINE VI load_i(const void* p) { return _mm256_load_si256(static_cast<const __m256i*>(p)); }
SLUICE_VNNI_INLINE VI set1_i(int32_t v) { return _mm256_set1_epi32(v); }
SLUICE_VNNI_INLINE VI add_i(VI a, VI b) { return _mm256_add_epi32(a, b); }
SLUICE_VNNI_INLINE VI sub_i(VI a, VI b) { return _mm256_sub_epi32(a, b); }
SLUICE_VNNI_INLINE VI mul_i(VI a, VI b) { return _mm256_mullo_epi32(a, b); }
SLUICE_VNNI_INLINE VI shl7(VI a) { return _mm256_slli_epi32(a, 7); }
SLUICE_VNNI_INLINE VI dot(VI acc, VI u, VI s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
SLUICE_VNNI_INLINE VF load_f(const float* p) { return _mm256_load_ps(p); }
SLUICE_VNNI_INLINE VF loadu_f(const float* p) { return _mm256_loadu_ps(p); }
SLUICE_VNNI_INLINE void storeu_f(float* p, VF v) { _mm256_storeu_ps(p, v); }
SLUICE_VNNI_INLINE VF set1_f(float v) { return _mm256_set1_ps(v); }
SLUICE_VNNI_INLINE VF mul_f(VF a, VF b) { return _mm256_mul_ps(a, b); }
SLUICE_VNNI_INLINE VF fma_f(VF a, VF b, VF c) { return _mm256_fmadd_ps(a, b, c); }
SLUICE_VNNI_INLINE VF to_f(VI v) { return _mm256_cvtepi32_ps(v); }
inline void decode(const WeightView& w, int64_t, const uint8_t* const* rows, int64_t b0, int nb,
                   DecodedChunk<kRows>& c) {
  decode_chunk8(w.type, rows, b0, nb, c);
}
inline bool reads_packed(const WeightView&) { return false; }  // packed weights have groups of 16
inline ChunkRef<kRows> packed_chunk(const WeightView&, int64_t, int64_t) { return {}; }
#endif

constexpr int kTile = 8;  // tokens per tile
using Chunk = ChunkRef<kRows>;

// Where tile token t's activations are: unsigned levels, block scales, 16-element sums.
struct TileTokens {
  const uint8_t* xu[kTile];
  const float* dx[kTile];
  const int16_t* sums[kTile];
};

SLUICE_VNNI_INLINE VI bcast4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return set1_i(v);
}

// part[t] = exact sum of x w over the 4-byte steps [j0, j1) of sub-block i (global index b),
// per row: vpdpbusd on x + 128, less 128 times the rows' level sums.
template <int kT>
SLUICE_VNNI_INLINE void step_sums(const Chunk& c, int i, int64_t b, int j0, int j1, const TileTokens& tk, VI* part) {
  const VI ones = set1_i(0x01010101);
  VI ws = zero_i();
  for (int t = 0; t < kT; ++t) part[t] = zero_i();
  for (int j = j0; j < j1; ++j) {
    const VI w = load_i(c.w[i][j]);
    ws = dot(ws, ones, w);
    for (int t = 0; t < kT; ++t) part[t] = dot(part[t], bcast4(tk.xu[t] + b * kSubBlock + 4 * j), w);
  }
  const VI excess = shl7(ws);
  for (int t = 0; t < kT; ++t) part[t] = sub_i(part[t], excess);
}

// acc[t][r] over sub-blocks [b0, b0 + nb) of the chunk for kT tokens: matmul_quant.cc's tile, on
// vpdpbusd. REQUIRES: b0 and nb multiples of kSub.
template <int kT, bool kHalves, bool kMin, int kSub>
SLUICE_VNNI_TARGET void tile(const Chunk& c, int64_t b0, int nb, const TileTokens& tk, float* acc) {
  VF a[kT];
  for (int t = 0; t < kT; ++t) a[t] = loadu_f(acc + t * kRows);
  VI isum[kT], msum[kT], part[kT];
  for (int t = 0; t < kT; ++t) isum[t] = msum[t] = zero_i();
  for (int i = 0; i < nb; ++i) {
    const int64_t b = b0 + i;
    if (i > 0 && b % kSub == 0) {
      for (int t = 0; t < kT; ++t) isum[t] = msum[t] = zero_i();
    }
    if constexpr (kHalves) {
      for (int h = 0; h < 2; ++h) {
        step_sums<kT>(c, i, b, 4 * h, 4 * h + 4, tk, part);
        const VI sc = load_i(c.sc[i][h]);
        for (int t = 0; t < kT; ++t) isum[t] = add_i(isum[t], mul_i(part[t], sc));
      }
    } else {
      step_sums<kT>(c, i, b, 0, 8, tk, part);
      if constexpr (kSub == 1) {
        for (int t = 0; t < kT; ++t) isum[t] = add_i(isum[t], part[t]);
      } else {
        const VI sc = load_i(c.sc[i][0]);
        for (int t = 0; t < kT; ++t) isum[t] = add_i(isum[t], mul_i(part[t], sc));
      }
    }
    if constexpr (kMin) {  // as the amx epilogue: one vpmulld per token where m0 == m1, none where m = 1
      const VI m0 = load_i(c.m[i][0]), m1 = load_i(c.m[i][1]);
      for (int t = 0; t < kT; ++t) {
        const int32_t s0 = tk.sums[t][2 * b], s1 = tk.sums[t][2 * b + 1];
        if constexpr (kHalves) {
          msum[t] = add_i(msum[t], add_i(mul_i(m0, set1_i(s0)), mul_i(m1, set1_i(s1))));
        } else if constexpr (kSub == 1) {
          msum[t] = add_i(msum[t], set1_i(s0 + s1));
        } else {
          msum[t] = add_i(msum[t], mul_i(m0, set1_i(s0 + s1)));
        }
      }
    }
    if ((b + 1) % kSub != 0) continue;
    const int64_t p = b / kSub;
    const VF d = load_f(c.d[i]);
    for (int t = 0; t < kT; ++t) a[t] = fma_f(mul_f(d, set1_f(tk.dx[t][p])), to_f(isum[t]), a[t]);
    if constexpr (kMin) {
      const VF dmin = load_f(c.dmin[i]);
      for (int t = 0; t < kT; ++t) a[t] = fma_f(mul_f(dmin, set1_f(tk.dx[t][p])), to_f(msum[t]), a[t]);
    }
  }
  for (int t = 0; t < kT; ++t) storeu_f(acc + t * kRows, a[t]);
}

using TileFn = void (*)(const Chunk&, int64_t, int, const TileTokens&, float*);

// tile<kT, ...> for kT = 1 .. kTile, indexed by kT - 1.
template <bool kHalves, bool kMin, int kSub, int... kT>
constexpr std::array<TileFn, sizeof...(kT)> tiles_of(std::integer_sequence<int, kT...>) {
  return {tile<kT + 1, kHalves, kMin, kSub>...};
}

template <bool kHalves, bool kMin, int kSub>
constexpr std::array<TileFn, kTile> kTiles = tiles_of<kHalves, kMin, kSub>(std::make_integer_sequence<int, kTile>{});

const std::array<TileFn, kTile>& tiles_for(gguf::TensorType t) {
  const bool halves = has_half_scales(t), min = has_min(t), super = block_elements(t) == kSuperBlock;
  if (!super) return min ? kTiles<false, true, 1> : kTiles<false, false, 1>;
  if (halves) return min ? kTiles<true, true, 8> : kTiles<true, false, 8>;
  return min ? kTiles<false, true, 8> : kTiles<false, false, 8>;
}

#if SLUICE_VNNI_BITS == 512
// ---- One token on the lean form (packed_weight.h): as many bytes as the file's, no decoding ----

// 16 halves as floats (the masked form, as to_f).
SLUICE_VNNI_INLINE __m512 halves16(const uint16_t* p) {
  return _mm512_maskz_cvtph_ps(static_cast<__mmask16>(0xFFFF), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// 16 bytes widened to int32 lanes, signed or unsigned (masked forms, as to_f).
SLUICE_VNNI_INLINE __m512i widen_i8(const int8_t* p) {
  return _mm512_maskz_cvtepi8_epi32(static_cast<__mmask16>(0xFFFF), _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
SLUICE_VNNI_INLINE __m512i widen_u8(const uint8_t* p) {
  return _mm512_maskz_cvtepu8_epi32(static_cast<__mmask16>(0xFFFF), _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

SLUICE_VNNI_INLINE __m512i xbcast(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// The IQ4 table in every 128-bit lane, as the table's values plus 128 (unsigned: what the
// one-token kernels multiply) or as the signed values themselves (what the tile kernels want).
SLUICE_VNNI_INLINE __m512i iq4_table(bool unsigned_levels) {
  alignas(16) int8_t t[16];
  for (int i = 0; i < 16; ++i) t[i] = static_cast<int8_t>(unsigned_levels ? kIq4nlValues[i] + 128 : kIq4nlValues[i]);
  return _mm512_maskz_broadcast_i32x4(static_cast<__mmask16>(0xFFFF), _mm_load_si128(reinterpret_cast<const __m128i*>(t)));
}

// Vector p of a sub-block's lean levels (v, 64 bytes: step 2p in the low nibbles, 2p + 1 in the
// high ones) unpacked into the two steps' levels: bit planes above 4 from high (the sub-block's
// kPlanes planes of 64 bytes), and for kTable the indices looked up in table.
template <int kPlanes, bool kTable>
SLUICE_VNNI_INLINE void unpack_lean(__m512i v, const uint8_t* high, int p, __m512i table, __m512i& lo, __m512i& hi) {
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
SLUICE_VNNI_INLINE __m512i unpack_lean2(__m512i v, const uint8_t* high, int j) {
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
SLUICE_VNNI_INLINE void prefetch_part(const uint8_t* next, int64_t b, size_t part, size_t group_bytes) {
  if (next == nullptr) return;
  for (size_t off = b * part; off < std::min(group_bytes, (b + 1) * part); off += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(next + off), _MM_HINT_T0);
  }
}

// A group's 16 results into y (fewer in a last partial group).
SLUICE_VNNI_INLINE void store_group16(float* y, int64_t g, int64_t rows, __m512 a) {
  const int64_t n0 = g * kRows, num_rows = std::min<int64_t>(kRows, rows - n0);
  if (num_rows == kRows) {
    _mm512_storeu_ps(y + n0, a);
    return;
  }
  alignas(64) float out[kRows];
  _mm512_store_ps(out, a);
  std::memcpy(y + n0, out, num_rows * sizeof(float));
}

// kBits: 4, 5 or 8; kTable: IQ4_NL (the nibbles index its table, stored as value + 128).
template <int kBits, bool kTable, bool kMin>
SLUICE_VNNI_TARGET void lean_groups(const PackedWeight& pw, int64_t num_rows_total, int64_t num_blocks, int offset,
                                    const int8_t* x, const float* dx, const int16_t* sums, float* y,
                                    int64_t group_begin, int64_t group_end) {
  const __m512i table = iq4_table(true);
  constexpr int64_t kLevelBytes = kBits == 8 ? 512 : 256;
  constexpr int kPlanes = kBits == 5 ? 1 : 0;
  const size_t group_bytes = pw.lean_group_bytes();
  const size_t part = (group_bytes + num_blocks - 1) / num_blocks;
  for (int64_t g = group_begin; g < group_end; ++g) {
    const PackedWeight::Lean lean = pw.lean_group(g);
    const uint8_t* next = g + 1 < group_end ? lean.levels + group_bytes : nullptr;
    __m512 a = _mm512_setzero_ps();
    for (int64_t b = 0; b < num_blocks; ++b) {
      prefetch_part(next, b, part, group_bytes);
      const uint8_t* lv = lean.levels + b * kLevelBytes;
      const int8_t* xb = x + b * kSubBlock;
      // Two accumulators: eight dependent vpdpbusd would wait on each other's latency.
      __m512i acc = _mm512_setzero_si512(), acc2 = _mm512_setzero_si512();
      if constexpr (kBits == 8) {
        for (int j = 0; j < 8; j += 2) {
          acc = _mm512_dpbusd_epi32(acc, _mm512_load_si512(lv + 64 * j), xbcast(xb + 4 * j));
          acc2 = _mm512_dpbusd_epi32(acc2, _mm512_load_si512(lv + 64 * j + 64), xbcast(xb + 4 * j + 4));
        }
      } else {
        for (int p = 0; p < 4; ++p) {
          __m512i lo, hi;
          unpack_lean<kPlanes, kTable>(_mm512_load_si512(lv + 64 * p), lean.high + b * 64 * kPlanes, p, table, lo, hi);
          acc = _mm512_dpbusd_epi32(acc, lo, xbcast(xb + 8 * p));
          acc2 = _mm512_dpbusd_epi32(acc2, hi, xbcast(xb + 8 * p + 4));
        }
      }
      acc = _mm512_add_epi32(acc, acc2);
      const int32_t sx = int32_t{sums[2 * b]} + sums[2 * b + 1];
      const __m512i isum = _mm512_sub_epi32(acc, _mm512_set1_epi32(offset * sx));
      const __m512 xs = _mm512_set1_ps(dx[b]);
      const __m512 d = halves16(lean.d + b * kRows);
      a = _mm512_fmadd_ps(_mm512_mul_ps(d, xs), to_f(isum), a);
      if constexpr (kMin) {  // msum = sum(x) (the integer min is 1)
        const __m512 dmin = halves16(lean.dmin + b * kRows);
        a = _mm512_fmadd_ps(_mm512_mul_ps(dmin, xs), to_f(_mm512_set1_epi32(sx)), a);
      }
    }
    store_group16(y, g, num_rows_total, a);
  }
}

// The super-block types (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS): kBits 2 to 6; kHalves: scales
// (and Q2_K's mins) per 16. Per sub-block the dot product of each half (steps 0..3 are elements
// 0..15: 4-bit vectors 0, 1 and 2, 3; 2-bit vectors 0 and 1), scaled by its integer scale into
// the super-block's sum; per super-block the float steps.
template <int kBits, bool kTable, bool kMin, bool kHalves>
SLUICE_VNNI_TARGET void lean_super_groups(const PackedWeight& pw, int64_t num_rows_total, int64_t num_blocks, int offset,
                                          const int8_t* x, const float* dx, const int16_t* sums, float* y,
                                          int64_t group_begin, int64_t group_end) {
  const __m512i table = iq4_table(true);
  constexpr bool kTwoBit = kBits <= 3;
  constexpr int kPlanes = kTwoBit ? kBits - 2 : kBits - 4;
  constexpr int64_t kLevelBytes = kTwoBit ? 128 : 256;
  const size_t group_bytes = pw.lean_group_bytes();
  const size_t part = (group_bytes + num_blocks - 1) / num_blocks;
  for (int64_t g = group_begin; g < group_end; ++g) {
    const PackedWeight::Lean lean = pw.lean_group(g);
    const uint8_t* next = g + 1 < group_end ? lean.levels + group_bytes : nullptr;
    __m512 a = _mm512_setzero_ps();
    __m512i isum = _mm512_setzero_si512(), msum = _mm512_setzero_si512();
    for (int64_t b = 0; b < num_blocks; ++b) {
      prefetch_part(next, b, part, group_bytes);
      const uint8_t* lv = lean.levels + b * kLevelBytes;
      const int8_t* xb = x + b * kSubBlock;
      __m512i half[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
      if constexpr (kTwoBit) {
        for (int p = 0; p < 2; ++p) {
          const __m512i v = _mm512_load_si512(lv + 64 * p);
          for (int j = 4 * p; j < 4 * p + 4; ++j) {
            half[p] = _mm512_dpbusd_epi32(half[p], unpack_lean2<kPlanes>(v, lean.high + b * 64 * kPlanes, j),
                                          xbcast(xb + 4 * j));
          }
        }
      } else {
        for (int p = 0; p < 4; ++p) {
          __m512i lo, hi;
          unpack_lean<kPlanes, kTable>(_mm512_load_si512(lv + 64 * p), lean.high + b * 64 * kPlanes, p, table, lo, hi);
          half[p / 2] = _mm512_dpbusd_epi32(half[p / 2], lo, xbcast(xb + 8 * p));
          half[p / 2] = _mm512_dpbusd_epi32(half[p / 2], hi, xbcast(xb + 8 * p + 4));
        }
      }
      const int32_t s0 = sums[2 * b], s1 = sums[2 * b + 1];
      const __m512i d0 = _mm512_sub_epi32(half[0], _mm512_set1_epi32(offset * s0));
      const __m512i d1 = _mm512_sub_epi32(half[1], _mm512_set1_epi32(offset * s1));
      if constexpr (kHalves) {
        const __m512i sc0 = widen_i8(lean.sc + b * 32);
        const __m512i sc1 = widen_i8(lean.sc + b * 32 + 16);
        isum = _mm512_add_epi32(isum, _mm512_add_epi32(_mm512_mullo_epi32(sc0, d0), _mm512_mullo_epi32(sc1, d1)));
      } else {
        const __m512i sc = widen_i8(lean.sc + b * 16);
        isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(sc, _mm512_add_epi32(d0, d1)));
      }
      if constexpr (kMin && kHalves) {
        const __m512i m0 = widen_u8(lean.m + b * 32), m1 = widen_u8(lean.m + b * 32 + 16);
        msum = _mm512_add_epi32(msum, _mm512_add_epi32(_mm512_mullo_epi32(m0, _mm512_set1_epi32(s0)),
                                                       _mm512_mullo_epi32(m1, _mm512_set1_epi32(s1))));
      } else if constexpr (kMin) {
        const __m512i m = widen_u8(lean.m + b * 16);
        msum = _mm512_add_epi32(msum, _mm512_mullo_epi32(m, _mm512_set1_epi32(s0 + s1)));
      }
      if ((b + 1) % 8 != 0) continue;
      const int64_t q = b / 8;
      const __m512 xs = _mm512_set1_ps(dx[q]);
      a = _mm512_fmadd_ps(_mm512_mul_ps(halves16(lean.d + q * kRows), xs), to_f(isum), a);
      if constexpr (kMin) a = _mm512_fmadd_ps(_mm512_mul_ps(halves16(lean.dmin + q * kRows), xs), to_f(msum), a);
      isum = msum = _mm512_setzero_si512();
    }
    store_group16(y, g, num_rows_total, a);
  }
}

// Sub-blocks [b0, b0 + nb) of row group g decoded from the lean form into the tile kernels'
// chunk: the levels are already transposed, so this is unpacking (q = u - offset), widening the
// integer scales and converting the halves, the same values decode_chunk16 gives.
template <int kBits, bool kTable, bool kMin, bool kSuper, bool kHalves>
SLUICE_VNNI_TARGET void lean_chunk(const PackedWeight& pw, int64_t g, int64_t b0, int nb, int offset,
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
#endif

}  // namespace

#if SLUICE_VNNI_BITS == 512
void lean_decode_chunk(const WeightView& w, int64_t g, int64_t b0, int nb, DecodedChunk<kRows>& c) {
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

void lean_one_token(const WeightView& w, const QuantizedActivations& xq, float* y, int64_t group_begin,
                    int64_t group_end) {
  using T = gguf::TensorType;
  const PackedWeight& pw = *w.packed;
  const int64_t nb = w.cols / kSubBlock;
  const int off = PackedWeight::lean_offset(w.type);
  const int8_t* x = xq.q.data();
  const float* dx = xq.d.data();
  const int16_t* sums = xq.sums.data();
  switch (w.type) {
    case T::kQ4_0: return lean_groups<4, false, false>(pw, w.rows, nb, off, x, dx, sums, y, group_begin, group_end);
    case T::kQ4_1: return lean_groups<4, false, true>(pw, w.rows, nb, off, x, dx, sums, y, group_begin, group_end);
    case T::kIQ4_NL: return lean_groups<4, true, false>(pw, w.rows, nb, off, x, dx, sums, y, group_begin, group_end);
    case T::kQ5_0: return lean_groups<5, false, false>(pw, w.rows, nb, off, x, dx, sums, y, group_begin, group_end);
    case T::kQ5_1: return lean_groups<5, false, true>(pw, w.rows, nb, off, x, dx, sums, y, group_begin, group_end);
    case T::kQ8_0: return lean_groups<8, false, false>(pw, w.rows, nb, off, x, dx, sums, y, group_begin, group_end);
    case T::kQ2_K:
      return lean_super_groups<2, false, true, true>(pw, w.rows, nb, off, x, dx, sums, y, group_begin, group_end);
    case T::kQ3_K:
      return lean_super_groups<3, false, false, true>(pw, w.rows, nb, off, x, dx, sums, y, group_begin, group_end);
    case T::kQ4_K:
      return lean_super_groups<4, false, true, false>(pw, w.rows, nb, off, x, dx, sums, y, group_begin, group_end);
    case T::kQ5_K:
      return lean_super_groups<5, false, true, false>(pw, w.rows, nb, off, x, dx, sums, y, group_begin, group_end);
    case T::kQ6_K:
      return lean_super_groups<6, false, false, true>(pw, w.rows, nb, off, x, dx, sums, y, group_begin, group_end);
    case T::kIQ4_XS:
      return lean_super_groups<4, true, false, false>(pw, w.rows, nb, off, x, dx, sums, y, group_begin, group_end);
    default: return;
  }
}
#endif

void matmul_groups(const WeightView& w, const QuantizedActivations& xq, const uint8_t* xu, int64_t num_tokens, float* y,
                   int64_t group_begin, int64_t group_end) {
  const std::array<TileFn, kTile>& fns = tiles_for(w.type);
  const int64_t cols = w.cols, num_blocks = cols / kSubBlock;
  const int64_t dx_stride = cols / xq.block, sums_stride = cols / 16;
  std::vector<float> acc(num_tokens * kRows);
  const bool packed = reads_packed(w);
  std::unique_ptr<DecodedChunk<kRows>> decoded;  // off the stack of pool threads
  if (!packed) decoded = std::make_unique<DecodedChunk<kRows>>();
  for (int64_t g = group_begin; g < group_end; ++g) {
    const int64_t n0 = g * kRows;
    const uint8_t* rows[kRows];
    const int64_t num_rows = group_rows(w, g, rows);
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t b0 = 0; b0 < num_blocks; b0 += kChunkSubBlocks) {
      const int nb = static_cast<int>(std::min<int64_t>(kChunkSubBlocks, num_blocks - b0));
      Chunk chunk;
      if (packed) {
        chunk = packed_chunk(w, g, b0 / kChunkSubBlocks);
      } else {
        decode(w, g, rows, b0, nb, *decoded);
        chunk = chunk_ref(*decoded);
      }
      for (int64_t t0 = 0; t0 < num_tokens; t0 += kTile) {
        const int kt = static_cast<int>(std::min<int64_t>(kTile, num_tokens - t0));
        TileTokens tk{};
        for (int t = 0; t < kt; ++t) {
          tk.xu[t] = xu + (t0 + t) * cols;
          tk.dx[t] = xq.d.data() + (t0 + t) * dx_stride;
          tk.sums[t] = xq.sums.empty() ? nullptr : xq.sums.data() + (t0 + t) * sums_stride;
        }
        fns[kt - 1](chunk, b0, nb, tk, acc.data() + t0 * kRows);
      }
    }
    store_group<kRows>(acc.data(), num_tokens, num_rows, y, w.rows, n0);
  }
}

}  // namespace SLUICE_VNNI_NS
}  // namespace sluice::kernels

#undef SLUICE_VNNI_NS
#undef SLUICE_VNNI_TARGET
#undef SLUICE_VNNI_INLINE
