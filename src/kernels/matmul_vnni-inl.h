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
namespace {
// From the lean form where the weight has it, else from the file's blocks.
inline void decode(const WeightView& w, int64_t g, const uint8_t* const* rows, int64_t b0, int nb,
                   DecodedChunk<kRows>& c) {
  if (w.packed != nullptr && w.packed->lean()) return lean_decode_chunk16(w, g, b0, nb, c);
  decode_chunk16(w.type, rows, b0, nb, c);
}
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


}  // namespace


void matmul_groups(const WeightView& w, const QuantizedActivations& xq, const uint8_t* xu, int64_t num_tokens, float* y,
                   int64_t group_begin, int64_t group_end) {
  const std::array<TileFn, kTile>& fns = tiles_for(w.type);
  const int64_t cols = w.cols, num_blocks = cols / kSubBlock;
  const int64_t dx_stride = cols / xq.block, sums_stride = cols / 16;
  std::vector<float> acc(num_tokens * kRows);
  auto decoded = std::make_unique<DecodedChunk<kRows>>();  // off the stack of pool threads
  for (int64_t g = group_begin; g < group_end; ++g) {
    const int64_t n0 = g * kRows;
    const uint8_t* rows[kRows];
    const int64_t num_rows = group_rows(w, g, rows);
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t b0 = 0; b0 < num_blocks; b0 += kChunkSubBlocks) {
      const int nb = static_cast<int>(std::min<int64_t>(kChunkSubBlocks, num_blocks - b0));
      decode(w, g, rows, b0, nb, *decoded);
      const Chunk chunk = chunk_ref(*decoded);
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
