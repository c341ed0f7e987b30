// The per-target kernels of matmul_quant.cc (read its header first), included by it inside its
// Highway target namespace, once per target: with AVX2, each row's sub-blocks decoded into
// vectors of 32 int8 levels, the chunk transposed for the token tiles, the one-token direct
// path and the tiles themselves; below AVX2, the same integers in scalar code. No include guard,
// on purpose (Highway includes matmul_quant.cc once per target).

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
// ---- Decoding with AVX2: one sub-block of one row into a vector of 32 int8 levels ----

HWY_INLINE uint16_t half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

// The 32 nibbles of 16 bytes: elements 0..15 the low nibbles, 16..31 the high ones.
HWY_INLINE __m256i nibbles16(const uint8_t* p) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i m = _mm_set1_epi8(15);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m), _mm_and_si128(b, m));
}

// 0xFF in byte k where bit k of q is set.
HWY_INLINE __m256i bit_bytes(uint32_t q) {
  const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                                        3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int32_t>(q)), shuf);
  return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

// Bits [shift, shift + width) of each of 32 bytes at p.
HWY_INLINE __m256i bit_field(const uint8_t* p, int shift, int width) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i mask = _mm256_set1_epi8(static_cast<char>((1 << width) - 1));
  return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(shift)), mask);
}

HWY_INLINE __m256i iq4_levels(__m256i idx) {
  const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
  return _mm256_shuffle_epi8(table, idx);
}

// Sub-block b of a row: levels as quant_blocks.h's decode_block32 gives them, and its scales.
struct Sub {
  __m256i q;
  int32_t sc[2], m[2];
  uint16_t d, dmin;  // IEEE halves; the K-quants' dmin is negated when used (kNegMin)
};

// Types whose values subtract their min (dmin * m stored as a positive half).
constexpr bool neg_min(gguf::TensorType t) {
  return t == gguf::TensorType::kQ2_K || t == gguf::TensorType::kQ4_K || t == gguf::TensorType::kQ5_K;
}
// Types whose integer scales are always 1.
constexpr bool unit_scale(gguf::TensorType t) { return block_elements(t) == kSubBlock; }

// The 8 rows' halves as floats (negated for kNeg).
template <bool kNeg>
HWY_INLINE __m256 halves(const Sub* sub, uint16_t Sub::*field) {
  auto h = [&](int r) { return static_cast<int16_t>(sub[r].*field); };
  const __m256 v = _mm256_cvtph_ps(_mm_setr_epi16(h(0), h(1), h(2), h(3), h(4), h(5), h(6), h(7)));
  return kNeg ? _mm256_xor_ps(v, _mm256_set1_ps(-0.0f)) : v;
}

template <gguf::TensorType t>
HWY_INLINE void unpack(const uint8_t* row, int64_t b, Sub& o) {
  using T = gguf::TensorType;
  o.sc[0] = o.sc[1] = 1;
  o.m[0] = o.m[1] = 0;
  o.dmin = 0;  // +0.0
  const int s = static_cast<int>(b % 8);
  switch (t) {
    case T::kQ4_0: {
      const uint8_t* p = row + b * 18;
      o.d = half_at(p);
      o.q = _mm256_sub_epi8(nibbles16(p + 2), _mm256_set1_epi8(8));
      return;
    }
    case T::kQ4_1: {
      const uint8_t* p = row + b * 20;
      o.d = half_at(p);
      o.dmin = half_at(p + 2);
      o.m[0] = o.m[1] = 1;
      o.q = nibbles16(p + 4);
      return;
    }
    case T::kQ5_0: case T::kQ5_1: {
      const bool q51 = t == T::kQ5_1;
      const uint8_t* p = row + b * (q51 ? 24 : 22);
      o.d = half_at(p);
      if (q51) {
        o.dmin = half_at(p + 2);
        o.m[0] = o.m[1] = 1;
      }
      const uint8_t* qh = p + (q51 ? 4 : 2);
      uint32_t bits;
      std::memcpy(&bits, qh, 4);
      o.q = _mm256_or_si256(nibbles16(qh + 4), _mm256_and_si256(bit_bytes(bits), _mm256_set1_epi8(16)));
      if (!q51) o.q = _mm256_sub_epi8(o.q, _mm256_set1_epi8(16));
      return;
    }
    case T::kQ8_0: {
      const uint8_t* p = row + b * 34;
      o.d = half_at(p);
      o.q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
      return;
    }
    case T::kIQ4_NL: {
      const uint8_t* p = row + b * 18;
      o.d = half_at(p);
      o.q = iq4_levels(nibbles16(p + 2));
      return;
    }
    case T::kQ2_K: {
      const uint8_t* p = row + (b / 8) * 84;
      o.d = half_at(p + 80);
      o.dmin = half_at(p + 82);
      o.q = bit_field(p + 16 + 32 * (s / 4), 2 * (s % 4), 2);
      for (int h = 0; h < 2; ++h) {
        o.sc[h] = p[2 * s + h] & 15;
        o.m[h] = p[2 * s + h] >> 4;
      }
      return;
    }
    case T::kQ3_K: {
      const uint8_t* p = row + (b / 8) * 110;
      o.d = half_at(p + 108);
      const __m256i low = bit_field(p + 32 + 32 * (s / 4), 2 * (s % 4), 2);
      const __m256i high = bit_field(p, s, 1);  // 1 where no 4 is taken off
      o.q = _mm256_sub_epi8(low, _mm256_andnot_si256(_mm256_slli_epi16(high, 2), _mm256_set1_epi8(4)));
      for (int h = 0; h < 2; ++h) o.sc[h] = quant_detail::scale_q3k(2 * s + h, p + 96) - 32;
      return;
    }
    case T::kQ4_K: case T::kQ5_K: {
      const bool q5 = t == T::kQ5_K;
      const uint8_t* p = row + (b / 8) * (q5 ? 176 : 144);
      o.d = half_at(p);
      o.dmin = half_at(p + 2);
      int32_t sc, m;
      quant_detail::scale_min_k4(s, p + 4, sc, m);
      o.sc[0] = o.sc[1] = sc;
      o.m[0] = o.m[1] = m;
      o.q = bit_field(p + (q5 ? 48 : 16) + 32 * (s / 2), 4 * (s % 2), 4);
      if (q5) o.q = _mm256_or_si256(o.q, _mm256_slli_epi16(bit_field(p + 16, s, 1), 4));
      return;
    }
    case T::kQ6_K: {
      const uint8_t* p = row + (b / 8) * 210;
      const int h = s / 4, c = s % 4;
      o.d = half_at(p + 208);
      const __m256i low = bit_field(p + 64 * h + 32 * (c % 2), c < 2 ? 0 : 4, 4);
      const __m256i high = bit_field(p + 128 + 32 * h, 2 * c, 2);
      o.q = _mm256_sub_epi8(_mm256_or_si256(low, _mm256_slli_epi16(high, 4)), _mm256_set1_epi8(32));
      const auto* scales = reinterpret_cast<const int8_t*>(p + 192);
      for (int g = 0; g < 2; ++g) o.sc[g] = scales[8 * h + 2 * c + g];
      return;
    }
    case T::kIQ4_XS: {
      const uint8_t* p = row + (b / 8) * 136;
      o.d = half_at(p);
      uint16_t scales_h;
      std::memcpy(&scales_h, p + 2, 2);
      const int low = (p[4 + s / 2] >> (4 * (s % 2))) & 15, high = (scales_h >> (2 * s)) & 3;
      o.sc[0] = o.sc[1] = (low | (high << 4)) - 32;
      o.q = iq4_levels(nibbles16(p + 8 + 16 * s));
      return;
    }
    default: o.q = _mm256_setzero_si256(); return;
  }
}

// The chunk decoded and transposed: each row's sub-block unpacked, then each 8 rows' vectors
// interleaved 4 bytes at a time (32-bit lane r of step j = row r's levels 4j..4j+3).
template <gguf::TensorType kType, int kN>
void decode_chunk(const uint8_t* const* rows, int64_t b0, int num_blocks, DecodedChunk<kN>& c) {
  Sub sub[8];
  for (int i = 0; i < num_blocks; ++i) {
    for (int o = 0; o < kN; o += 8) {  // rows o .. o + 7
      for (int r = 0; r < 8; ++r) {
        unpack<kType>(rows[o + r], b0 + i, sub[r]);
        for (int h = 0; h < 2; ++h) {
          c.sc[i][h][o + r] = sub[r].sc[h];
          c.m[i][h][o + r] = sub[r].m[h];
        }
      }
      _mm256_store_ps(c.d[i] + o, halves<false>(sub, &Sub::d));
      _mm256_store_ps(c.dmin[i] + o, halves<neg_min(kType)>(sub, &Sub::dmin));
      // 4x4 transposes of 32-bit lanes within each 128-bit half: rows (0..3) and (4..7) for
      // steps 0..3 (the low halves) and 4..7 (the high ones).
      for (int half = 0; half < 2; ++half) {
        __m256i v[4];  // [row k, steps of this half | row k + 4, same steps]
        for (int k = 0; k < 4; ++k) {
          const __m128i lo = half ? _mm256_extracti128_si256(sub[k].q, 1) : _mm256_castsi256_si128(sub[k].q);
          const __m128i hi = half ? _mm256_extracti128_si256(sub[k + 4].q, 1) : _mm256_castsi256_si128(sub[k + 4].q);
          v[k] = _mm256_set_m128i(hi, lo);
        }
        const __m256i t0 = _mm256_unpacklo_epi32(v[0], v[1]);
        const __m256i t1 = _mm256_unpackhi_epi32(v[0], v[1]);
        const __m256i t2 = _mm256_unpacklo_epi32(v[2], v[3]);
        const __m256i t3 = _mm256_unpackhi_epi32(v[2], v[3]);
        auto step = [&](int k) { return reinterpret_cast<__m256i*>(&c.w[i][4 * half + k][4 * o]); };
        _mm256_store_si256(step(0), _mm256_unpacklo_epi64(t0, t2));
        _mm256_store_si256(step(1), _mm256_unpackhi_epi64(t0, t2));
        _mm256_store_si256(step(2), _mm256_unpacklo_epi64(t1, t3));
        _mm256_store_si256(step(3), _mm256_unpackhi_epi64(t1, t3));
      }
    }
  }
}

// One token, straight from the rows (no transposition): each row's sub-block times the token's
// gives 8 lanes of 4-product sums (lanes 0..3 the first 16 elements), scaled per half where the
// halves' scales differ, then an add tree across the 8 rows leaves row r's isum in lane r: the
// same integers as the tile.
constexpr bool kHasDirect = true;

template <gguf::TensorType kType, bool kHalves, bool kMin, int kSub>
void direct(const uint8_t* const* rows, int64_t num_blocks, const int8_t* x, const float* dx, const int16_t* sums,
            const uint8_t* next_group, size_t group_bytes, float* acc) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 a = _mm256_setzero_ps();
  __m256i isum = _mm256_setzero_si256(), msum = _mm256_setzero_si256();
  Sub sub[kRows];
  // The next group follows in memory: at sub-block b, its b-th num_blocks-th part is asked for,
  // so its lines arrive spread over this group's work (rows of 896 columns end before the
  // hardware prefetcher picks up a stream; measured with matmul_bench, as for Q8_0).
  const size_t part = (group_bytes + num_blocks - 1) / num_blocks;
  for (int64_t b = 0; b < num_blocks; ++b) {
    if (next_group != nullptr) {
      for (size_t off = b * part; off < std::min(group_bytes, (b + 1) * part); off += 64) hwy::Prefetch(next_group + off);
    }
    const __m256i xb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + b * kSubBlock));
    __m256i p[kRows];
    for (int r = 0; r < kRows; ++r) {
      unpack<kType>(rows[r], b, sub[r]);
      const __m256i q = sub[r].q;
      p[r] = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(q), _mm256_sign_epi8(xb, q)), ones);
      if constexpr (kHalves) {
        p[r] = _mm256_mullo_epi32(p[r], _mm256_set_m128i(_mm_set1_epi32(sub[r].sc[1]), _mm_set1_epi32(sub[r].sc[0])));
      }
    }
    auto pair = [&](int r) {  // [r r+1 r r+1 | r r+1 r r+1]
      return _mm256_add_epi32(_mm256_unpacklo_epi32(p[r], p[r + 1]), _mm256_unpackhi_epi32(p[r], p[r + 1]));
    };
    auto quad = [&](int r) {  // [r..r+3 | r..r+3]
      const __m256i p0 = pair(r), p1 = pair(r + 2);
      return _mm256_add_epi32(_mm256_unpacklo_epi64(p0, p1), _mm256_unpackhi_epi64(p0, p1));
    };
    const __m256i lo = quad(0), hi = quad(4);
    __m256i sum = _mm256_add_epi32(_mm256_blend_epi32(lo, hi, 0xF0), _mm256_permute2x128_si256(lo, hi, 0x21));
    if constexpr (!kHalves && !unit_scale(kType)) {
      sum = _mm256_mullo_epi32(sum, _mm256_setr_epi32(sub[0].sc[0], sub[1].sc[0], sub[2].sc[0], sub[3].sc[0],
                                                       sub[4].sc[0], sub[5].sc[0], sub[6].sc[0], sub[7].sc[0]));
    }
    isum = _mm256_add_epi32(isum, sum);
    if constexpr (kMin) {
      const __m256i m0 = _mm256_setr_epi32(sub[0].m[0], sub[1].m[0], sub[2].m[0], sub[3].m[0], sub[4].m[0],
                                           sub[5].m[0], sub[6].m[0], sub[7].m[0]);
      const __m256i m1 = _mm256_setr_epi32(sub[0].m[1], sub[1].m[1], sub[2].m[1], sub[3].m[1], sub[4].m[1],
                                           sub[5].m[1], sub[6].m[1], sub[7].m[1]);
      msum = _mm256_add_epi32(msum, _mm256_mullo_epi32(m0, _mm256_set1_epi32(sums[2 * b])));
      msum = _mm256_add_epi32(msum, _mm256_mullo_epi32(m1, _mm256_set1_epi32(sums[2 * b + 1])));
    }
    if ((b + 1) % kSub != 0) continue;
    const __m256 xs = _mm256_set1_ps(dx[b / kSub]);
    a = _mm256_fmadd_ps(_mm256_mul_ps(halves<false>(sub, &Sub::d), xs), _mm256_cvtepi32_ps(isum), a);
    if constexpr (kMin) {
      const __m256 dmin = halves<neg_min(kType)>(sub, &Sub::dmin);
      a = _mm256_fmadd_ps(_mm256_mul_ps(dmin, xs), _mm256_cvtepi32_ps(msum), a);
    }
    isum = msum = _mm256_setzero_si256();
  }
  _mm256_storeu_ps(acc, a);
}

// acc[t][r] over sub-blocks [b0, b0 + num_blocks) of the chunk for kT tokens. kHalves: the two
// 16-element halves have their own scales; kMin: the type has a min term; kSub: sub-blocks per
// block of the weight type (1 or 8), whose integer sums are added before the float steps.
// REQUIRES: b0 and num_blocks multiples of kSub.
template <int kT, bool kHalves, bool kMin, int kSub>
HWY_INLINE void tile(const QuantChunk& c, int64_t b0, int num_blocks, const Tokens<kT>& tk, float* acc) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 a[kT];
  for (int t = 0; t < kT; ++t) a[t] = _mm256_loadu_ps(acc + t * kRows);
  __m256i isum[kT], msum[kT];
  for (int t = 0; t < kT; ++t) isum[t] = msum[t] = _mm256_setzero_si256();
  for (int i = 0; i < num_blocks; ++i) {
    const int64_t b = b0 + i;
    if (i > 0 && b % kSub == 0) {
      for (int t = 0; t < kT; ++t) isum[t] = msum[t] = _mm256_setzero_si256();
    }
    // Sums of 4-product sums over the 4-byte steps [j0, j1) of the sub-block.
    auto step_sums = [&](int j0, int j1, __m256i* sum) {
      for (int t = 0; t < kT; ++t) sum[t] = _mm256_setzero_si256();
      for (int j = j0; j < j1; ++j) {
        const __m256i w = _mm256_load_si256(reinterpret_cast<const __m256i*>(c.w[i][j]));
        const __m256i w_abs = _mm256_abs_epi8(w);
        for (int t = 0; t < kT; ++t) {
          int32_t x4;
          std::memcpy(&x4, tk.x[t] + b * kSubBlock + 4 * j, 4);
          const __m256i xs = _mm256_sign_epi8(_mm256_set1_epi32(x4), w);
          sum[t] = _mm256_add_epi32(sum[t], _mm256_madd_epi16(_mm256_maddubs_epi16(w_abs, xs), ones));
        }
      }
    };
    __m256i part[kT];
    if constexpr (kHalves) {
      for (int h = 0; h < 2; ++h) {
        step_sums(4 * h, 4 * h + 4, part);
        const __m256i sc = _mm256_load_si256(reinterpret_cast<const __m256i*>(c.sc[i][h]));
        for (int t = 0; t < kT; ++t) isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(part[t], sc));
      }
    } else {
      // One scale for the sub-block: sc * (sum of both halves), the same integer; the 32-element
      // types' scale is 1.
      step_sums(0, 8, part);
      if constexpr (kSub == 1) {
        for (int t = 0; t < kT; ++t) isum[t] = _mm256_add_epi32(isum[t], part[t]);
      } else {
        const __m256i sc = _mm256_load_si256(reinterpret_cast<const __m256i*>(c.sc[i][0]));
        for (int t = 0; t < kT; ++t) isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(part[t], sc));
      }
    }
    if constexpr (kMin) {
      const __m256i m0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(c.m[i][0]));
      const __m256i m1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(c.m[i][1]));
      for (int t = 0; t < kT; ++t) {
        msum[t] = _mm256_add_epi32(msum[t], _mm256_mullo_epi32(m0, _mm256_set1_epi32(tk.sums[t][2 * b])));
        msum[t] = _mm256_add_epi32(msum[t], _mm256_mullo_epi32(m1, _mm256_set1_epi32(tk.sums[t][2 * b + 1])));
      }
    }
    if ((b + 1) % kSub != 0) continue;
    const int64_t p = b / kSub;
    const __m256 d = _mm256_load_ps(c.d[i]);
    for (int t = 0; t < kT; ++t) {
      const __m256 s = _mm256_mul_ps(d, _mm256_set1_ps(tk.dx[t][p]));
      a[t] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(isum[t]), a[t]);
    }
    if constexpr (kMin) {
      const __m256 dmin = _mm256_load_ps(c.dmin[i]);
      for (int t = 0; t < kT; ++t) {
        const __m256 s = _mm256_mul_ps(dmin, _mm256_set1_ps(tk.dx[t][p]));
        a[t] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(msum[t]), a[t]);
      }
    }
  }
  for (int t = 0; t < kT; ++t) _mm256_storeu_ps(acc + t * kRows, a[t]);
}
#else
template <gguf::TensorType kType, int kN>
void decode_chunk(const uint8_t* const* rows, int64_t b0, int num_blocks, DecodedChunk<kN>& c) {
  Decoded32 dec;
  for (int i = 0; i < num_blocks; ++i) {
    for (int r = 0; r < kN; ++r) {
      decode_block32(kType, rows[r], b0 + i, dec);
      for (int j = 0; j < 8; ++j) std::memcpy(&c.w[i][j][4 * r], dec.q + 4 * j, 4);
      for (int h = 0; h < 2; ++h) {
        c.sc[i][h][r] = dec.sc[h];
        c.m[i][h][r] = dec.m[h];
      }
      c.d[i][r] = dec.d;
      c.dmin[i][r] = dec.dmin;
    }
  }
}

constexpr bool kHasDirect = false;

template <gguf::TensorType kType, bool kHalves, bool kMin, int kSub>
void direct(const uint8_t* const*, int64_t, const int8_t*, const float*, const int16_t*, const uint8_t*, size_t,
            float*) {}

// The same integers in scalar code; the float steps are one MulAdd each, as in the vector path.
template <int kT, bool kHalves, bool kMin, int kSub>
HWY_INLINE void tile(const QuantChunk& c, int64_t b0, int num_blocks, const Tokens<kT>& tk, float* acc) {
  const hn::CappedTag<float, 1> d1;
  auto mul_add = [&](float s, int32_t v, float a) {
    return hn::GetLane(hn::MulAdd(hn::Set(d1, s), hn::Set(d1, static_cast<float>(v)), hn::Set(d1, a)));
  };
  for (int t = 0; t < kT; ++t) {
    for (int r = 0; r < kRows; ++r) {
      float& a = acc[t * kRows + r];
      int32_t isum = 0, msum = 0;
      for (int i = 0; i < num_blocks; ++i) {
        const int64_t b = b0 + i;
        const int8_t* x = tk.x[t] + b * kSubBlock;
        if (b % kSub == 0) isum = msum = 0;
        for (int h = 0; h < 2; ++h) {
          int32_t part = 0;
          for (int k = 16 * h; k < 16 * h + 16; ++k) part += int32_t{c.w[i][k / 4][4 * r + k % 4]} * x[k];
          isum += c.sc[i][h][r] * part;
          if constexpr (kMin) msum += c.m[i][h][r] * tk.sums[t][2 * b + h];
        }
        if ((b + 1) % kSub != 0) continue;
        const int64_t p = b / kSub;
        a = mul_add(c.d[i][r] * tk.dx[t][p], isum, a);
        if constexpr (kMin) a = mul_add(c.dmin[i][r] * tk.dx[t][p], msum, a);
      }
    }
  }
}
#endif  // HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
