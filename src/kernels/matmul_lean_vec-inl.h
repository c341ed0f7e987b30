// The vectors of the lean kernels, included by matmul_lean-inl.h inside its namespace: what VI
// (int32 lanes, or 4 bytes a lane; lane r: row r), VF (floats, lane r: row r) and VX (a broadcast
// of one token's four activation bytes, the signed operand of vpdpbusd) are, and the operations
// the body uses on them, for each form:
// - SLUICE_LEAN_BITS 512: a 16-row group on one __m512i (AVX-512 VNNI);
// - 256, SLUICE_LEAN_PARTS 0 (the pair form): a 16-row group on two __m256i, rows 0-7 and 8-15;
// - 256, SLUICE_LEAN_PARTS 1 (the parts form): 8 rows on one __m256i, a group in two parts.
// A vector of kVecRows rows reads the part's share of each 64-byte vector of the layout (lane r
// of a step: 4 bytes at 4r) and kVecRows of each array of scales (matmul_lean-inl.h: lean_part).
// Without VNNI (SLUICE_LEAN_VNNI 0), vpmaddubsw and vpmaddwd stand in for vpdpbusd. Every form
// gives each row the same integers and float steps: the same bits. No include guard, on purpose.

#if SLUICE_LEAN_BITS == 512
// A row group on one vector; tiles of up to 4 tokens (each with its accumulators in registers:
// 32 of them here).
constexpr int kVecRows = 16;
constexpr int kMaxTile = 4;
using VI = __m512i;
using VF = __m512;
using VX = __m512i;
SLUICE_LEAN_INLINE VI zero_i() { return _mm512_setzero_si512(); }
SLUICE_LEAN_INLINE VF zero_f() { return _mm512_setzero_ps(); }
SLUICE_LEAN_INLINE VI load64(const uint8_t* p) { return _mm512_load_si512(p); }
SLUICE_LEAN_INLINE VI and_i(VI a, VI b) { return _mm512_and_si512(a, b); }
SLUICE_LEAN_INLINE VI or_i(VI a, VI b) { return _mm512_or_si512(a, b); }
SLUICE_LEAN_INLINE VI xor_i(VI a, VI b) { return _mm512_xor_si512(a, b); }
// a | (b & m) in one instruction (0xF8: the truth table of A | (B & C)).
SLUICE_LEAN_INLINE VI or_and(VI a, VI b, VI m) { return _mm512_ternarylogic_epi32(a, b, m, 0xF8); }
SLUICE_LEAN_INLINE VI srl16(VI a, int n) { return _mm512_srli_epi16(a, n); }
SLUICE_LEAN_INLINE VI splat8(int v) { return _mm512_set1_epi8(static_cast<char>(v)); }
SLUICE_LEAN_INLINE VI lookup(VI table, VI idx) { return _mm512_shuffle_epi8(table, idx); }
SLUICE_LEAN_INLINE VX xbcast(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}
SLUICE_LEAN_INLINE VI dot(VI acc, VI w, VX x) { return _mm512_dpbusd_epi32(acc, w, x); }
SLUICE_LEAN_INLINE VI dot_pair(VI acc, VI w0, VX x0, VI w1, VX x1) { return dot(dot(acc, w0, x0), w1, x1); }
// acc + the products of int16 pairs (vpdpwssd), and two int16 vectors' lanes as one's pairs.
SLUICE_LEAN_INLINE VI dot16(VI acc, VI a, VX b) { return _mm512_dpwssd_epi32(acc, a, b); }
SLUICE_LEAN_INLINE VI pair16(VI lo, VI hi) {
  return _mm512_or_si512(lo, _mm512_maskz_slli_epi32(static_cast<__mmask16>(0xFFFF), hi, 16));
}
SLUICE_LEAN_INLINE VI set1_i(int32_t v) { return _mm512_set1_epi32(v); }
SLUICE_LEAN_INLINE VI add_i(VI a, VI b) { return _mm512_add_epi32(a, b); }
SLUICE_LEAN_INLINE VI sub_i(VI a, VI b) { return _mm512_sub_epi32(a, b); }
SLUICE_LEAN_INLINE VI mul_i(VI a, VI b) { return _mm512_mullo_epi32(a, b); }
// The masked forms: GCC 12's plain ones read an undefined vector, which -Wmaybe-uninitialized flags.
SLUICE_LEAN_INLINE VF to_f(VI v) { return _mm512_maskz_cvtepi32_ps(static_cast<__mmask16>(0xFFFF), v); }
SLUICE_LEAN_INLINE VF halves16(const uint16_t* p) {
  return _mm512_maskz_cvtph_ps(static_cast<__mmask16>(0xFFFF), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
// 16 bytes widened to int32 lanes, signed or unsigned.
SLUICE_LEAN_INLINE VI widen_i8(const int8_t* p) {
  return _mm512_maskz_cvtepi8_epi32(static_cast<__mmask16>(0xFFFF), _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
SLUICE_LEAN_INLINE VI widen_u8(const uint8_t* p) {
  return _mm512_maskz_cvtepu8_epi32(static_cast<__mmask16>(0xFFFF), _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
SLUICE_LEAN_INLINE VF set1_f(float v) { return _mm512_set1_ps(v); }
SLUICE_LEAN_INLINE VF mul_f(VF a, VF b) { return _mm512_mul_ps(a, b); }
SLUICE_LEAN_INLINE VF fma_f(VF a, VF b, VF c) { return _mm512_fmadd_ps(a, b, c); }
SLUICE_LEAN_INLINE void store16(float* p, VF v) { _mm512_storeu_ps(p, v); }
SLUICE_LEAN_INLINE void store16_aligned(float* p, VF v) { _mm512_store_ps(p, v); }
// The 16-byte table in every 128-bit lane.
SLUICE_LEAN_INLINE VI table16(const int8_t* t) {
  return _mm512_maskz_broadcast_i32x4(static_cast<__mmask16>(0xFFFF), _mm_load_si128(reinterpret_cast<const __m128i*>(t)));
}
#else
// Eight rows on one __m256i: what both 256-bit forms are made of.
namespace v8 {
SLUICE_LEAN_INLINE __m256i load(const uint8_t* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); }
SLUICE_LEAN_INLINE __m256 halves(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
SLUICE_LEAN_INLINE __m256i widen_i8(const int8_t* p) {
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
SLUICE_LEAN_INLINE __m256i widen_u8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
SLUICE_LEAN_INLINE __m256i pair16(__m256i lo, __m256i hi) { return _mm256_or_si256(lo, _mm256_slli_epi32(hi, 16)); }
#if SLUICE_LEAN_VNNI
SLUICE_LEAN_INLINE __m256i dot(__m256i acc, __m256i w, __m256i x) { return _mm256_dpbusd_avx_epi32(acc, w, x); }
SLUICE_LEAN_INLINE __m256i dot16(__m256i acc, __m256i a, __m256i b) { return _mm256_dpwssd_avx_epi32(acc, a, b); }
SLUICE_LEAN_INLINE __m256i dot_pair(__m256i acc, __m256i w0, __m256i x0, __m256i w1, __m256i x1) {
  return dot(dot(acc, w0, x0), w1, x1);
}
#else
// vpdpbusd's sum of four products in two steps: vpmaddubsw's int16 sums of pairs, exact for
// levels up to 129 against |x| <= 127 (2 * 129 * 127 = 32766; the 8-bit levels go through
// dot_signed), then vpmaddwd by ones: the same int32 as vpdpbusd.
SLUICE_LEAN_INLINE __m256i dot(__m256i acc, __m256i w, __m256i x) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1)));
}
SLUICE_LEAN_INLINE __m256i dot16(__m256i acc, __m256i a, __m256i b) { return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)); }
// acc + w0 x0 + w1 x1 with one vpmaddwd: the two vpmaddubsw's int16 lanes summed first, exact
// for levels up to 64 (4 * 64 * 127 = 32512).
SLUICE_LEAN_INLINE __m256i dot_pair(__m256i acc, __m256i w0, __m256i x0, __m256i w1, __m256i x1) {
  const __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(w0, x0), _mm256_maddubs_epi16(w1, x1));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(s, _mm256_set1_epi16(1)));
}
// acc + w x for signed levels w: |w| times x with w's sign.
SLUICE_LEAN_INLINE __m256i dot_signed(__m256i acc, __m256i w, __m256i x) {
  return dot(acc, _mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
}
#endif
}  // namespace v8

SLUICE_LEAN_INLINE __m256i xbcast(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}
using VX = __m256i;

#if SLUICE_LEAN_PARTS
// Tiles of up to 4 tokens: a weight vector unpacked once serves all four (a token's state is 4 or
// 5 vectors for the super-block types, so some of it spills to L1; measured faster for batches
// all the same: matmul_lean_avx2.cc).
constexpr int kVecRows = 8;
constexpr int kMaxTile = 4;
using VI = __m256i;
using VF = __m256;
SLUICE_LEAN_INLINE VI zero_i() { return _mm256_setzero_si256(); }
SLUICE_LEAN_INLINE VF zero_f() { return _mm256_setzero_ps(); }
SLUICE_LEAN_INLINE VI load64(const uint8_t* p) { return v8::load(p); }
SLUICE_LEAN_INLINE VI and_i(VI a, VI b) { return _mm256_and_si256(a, b); }
SLUICE_LEAN_INLINE VI or_i(VI a, VI b) { return _mm256_or_si256(a, b); }
SLUICE_LEAN_INLINE VI xor_i(VI a, VI b) { return _mm256_xor_si256(a, b); }
SLUICE_LEAN_INLINE VI srl16(VI a, int n) { return _mm256_srli_epi16(a, n); }
SLUICE_LEAN_INLINE VI splat8(int v) { return _mm256_set1_epi8(static_cast<char>(v)); }
SLUICE_LEAN_INLINE VI lookup(VI table, VI idx) { return _mm256_shuffle_epi8(table, idx); }
SLUICE_LEAN_INLINE VI dot(VI acc, VI w, VX x) { return v8::dot(acc, w, x); }
SLUICE_LEAN_INLINE VI dot_pair(VI acc, VI w0, VX x0, VI w1, VX x1) { return v8::dot_pair(acc, w0, x0, w1, x1); }
SLUICE_LEAN_INLINE VI dot16(VI acc, VI a, VX b) { return v8::dot16(acc, a, b); }
#if !SLUICE_LEAN_VNNI
SLUICE_LEAN_INLINE VI dot_signed(VI acc, VI w, VX x) { return v8::dot_signed(acc, w, x); }
#endif
SLUICE_LEAN_INLINE VI pair16(VI lo, VI hi) { return v8::pair16(lo, hi); }
SLUICE_LEAN_INLINE VI set1_i(int32_t v) { return _mm256_set1_epi32(v); }
SLUICE_LEAN_INLINE VI add_i(VI a, VI b) { return _mm256_add_epi32(a, b); }
SLUICE_LEAN_INLINE VI sub_i(VI a, VI b) { return _mm256_sub_epi32(a, b); }
SLUICE_LEAN_INLINE VI mul_i(VI a, VI b) { return _mm256_mullo_epi32(a, b); }
SLUICE_LEAN_INLINE VF to_f(VI v) { return _mm256_cvtepi32_ps(v); }
SLUICE_LEAN_INLINE VF halves16(const uint16_t* p) { return v8::halves(p); }
SLUICE_LEAN_INLINE VI widen_i8(const int8_t* p) { return v8::widen_i8(p); }
SLUICE_LEAN_INLINE VI widen_u8(const uint8_t* p) { return v8::widen_u8(p); }
SLUICE_LEAN_INLINE VF set1_f(float v) { return _mm256_set1_ps(v); }
SLUICE_LEAN_INLINE VF mul_f(VF a, VF b) { return _mm256_mul_ps(a, b); }
SLUICE_LEAN_INLINE VF fma_f(VF a, VF b, VF c) { return _mm256_fmadd_ps(a, b, c); }
SLUICE_LEAN_INLINE void store16(float* p, VF v) { _mm256_storeu_ps(p, v); }
SLUICE_LEAN_INLINE void store16_aligned(float* p, VF v) { _mm256_store_ps(p, v); }
SLUICE_LEAN_INLINE VI table16(const int8_t* t) {
  return _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(t)));
}
#else
// Tiles of up to 2 tokens: a token's accumulators take 4 to 8 of the 16 registers (without VNNI,
// Q8_0 takes 4: lean_groups).
constexpr int kVecRows = 16;
constexpr int kMaxTile = 2;
struct VI {
  __m256i lo, hi;  // rows 0-7 (bytes 0-31 of a 64-byte vector), rows 8-15
};
struct VF {
  __m256 lo, hi;
};
SLUICE_LEAN_INLINE VI zero_i() { return {_mm256_setzero_si256(), _mm256_setzero_si256()}; }
SLUICE_LEAN_INLINE VF zero_f() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
SLUICE_LEAN_INLINE VI load64(const uint8_t* p) { return {v8::load(p), v8::load(p + 32)}; }
SLUICE_LEAN_INLINE VI and_i(VI a, VI b) { return {_mm256_and_si256(a.lo, b.lo), _mm256_and_si256(a.hi, b.hi)}; }
SLUICE_LEAN_INLINE VI or_i(VI a, VI b) { return {_mm256_or_si256(a.lo, b.lo), _mm256_or_si256(a.hi, b.hi)}; }
SLUICE_LEAN_INLINE VI xor_i(VI a, VI b) { return {_mm256_xor_si256(a.lo, b.lo), _mm256_xor_si256(a.hi, b.hi)}; }
SLUICE_LEAN_INLINE VI srl16(VI a, int n) { return {_mm256_srli_epi16(a.lo, n), _mm256_srli_epi16(a.hi, n)}; }
SLUICE_LEAN_INLINE VI splat8(int v) {
  const __m256i s = _mm256_set1_epi8(static_cast<char>(v));
  return {s, s};
}
SLUICE_LEAN_INLINE VI lookup(VI table, VI idx) {
  return {_mm256_shuffle_epi8(table.lo, idx.lo), _mm256_shuffle_epi8(table.hi, idx.hi)};
}
SLUICE_LEAN_INLINE VI dot(VI acc, VI w, VX x) { return {v8::dot(acc.lo, w.lo, x), v8::dot(acc.hi, w.hi, x)}; }
SLUICE_LEAN_INLINE VI dot_pair(VI acc, VI w0, VX x0, VI w1, VX x1) {
  return {v8::dot_pair(acc.lo, w0.lo, x0, w1.lo, x1), v8::dot_pair(acc.hi, w0.hi, x0, w1.hi, x1)};
}
SLUICE_LEAN_INLINE VI dot16(VI acc, VI a, VX b) { return {v8::dot16(acc.lo, a.lo, b), v8::dot16(acc.hi, a.hi, b)}; }
#if !SLUICE_LEAN_VNNI
SLUICE_LEAN_INLINE VI dot_signed(VI acc, VI w, VX x) {
  return {v8::dot_signed(acc.lo, w.lo, x), v8::dot_signed(acc.hi, w.hi, x)};
}
#endif
SLUICE_LEAN_INLINE VI pair16(VI lo, VI hi) { return {v8::pair16(lo.lo, hi.lo), v8::pair16(lo.hi, hi.hi)}; }
SLUICE_LEAN_INLINE VI set1_i(int32_t v) {
  const __m256i s = _mm256_set1_epi32(v);
  return {s, s};
}
SLUICE_LEAN_INLINE VI add_i(VI a, VI b) { return {_mm256_add_epi32(a.lo, b.lo), _mm256_add_epi32(a.hi, b.hi)}; }
SLUICE_LEAN_INLINE VI sub_i(VI a, VI b) { return {_mm256_sub_epi32(a.lo, b.lo), _mm256_sub_epi32(a.hi, b.hi)}; }
SLUICE_LEAN_INLINE VI mul_i(VI a, VI b) { return {_mm256_mullo_epi32(a.lo, b.lo), _mm256_mullo_epi32(a.hi, b.hi)}; }
SLUICE_LEAN_INLINE VF to_f(VI v) { return {_mm256_cvtepi32_ps(v.lo), _mm256_cvtepi32_ps(v.hi)}; }
SLUICE_LEAN_INLINE VF halves16(const uint16_t* p) { return {v8::halves(p), v8::halves(p + 8)}; }
SLUICE_LEAN_INLINE VI widen_i8(const int8_t* p) { return {v8::widen_i8(p), v8::widen_i8(p + 8)}; }
SLUICE_LEAN_INLINE VI widen_u8(const uint8_t* p) { return {v8::widen_u8(p), v8::widen_u8(p + 8)}; }
SLUICE_LEAN_INLINE VF set1_f(float v) { return {_mm256_set1_ps(v), _mm256_set1_ps(v)}; }
SLUICE_LEAN_INLINE VF mul_f(VF a, VF b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
SLUICE_LEAN_INLINE VF fma_f(VF a, VF b, VF c) {
  return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
SLUICE_LEAN_INLINE void store16(float* p, VF v) {
  _mm256_storeu_ps(p, v.lo);
  _mm256_storeu_ps(p + 8, v.hi);
}
SLUICE_LEAN_INLINE void store16_aligned(float* p, VF v) {
  _mm256_store_ps(p, v.lo);
  _mm256_store_ps(p + 8, v.hi);
}
SLUICE_LEAN_INLINE VI table16(const int8_t* t) {
  const __m256i v = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(t)));
  return {v, v};
}
#endif
SLUICE_LEAN_INLINE VI or_and(VI a, VI b, VI m) { return or_i(a, and_i(b, m)); }
#endif
