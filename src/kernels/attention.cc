// Highway compiles this file once per SIMD target and dispatches at run time (as matmul.cc).
//
// For one (token, head) the arithmetic is fixed by head_dim and the key count alone: each score
// is a dot product over 8-lane vectors in ascending dimension with one fixed lane reduction,
// then a scalar tail; a vector softmax over the scores; the output accumulates p_j * v_j in
// ascending position, per lane. Nothing depends on the batch, the block placement or the thread
// split.
//
// Shape: for one (token, kv head) item, keys are scored 8 at a time (8 independent FMA chains,
// reduced together), for every head of the GQA group; the outputs take tiles of 16 keys, and
// within a tile chunks of the head dimension with an accumulator per head and vector, so each
// value row is fetched from memory once for all heads of the group.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/cache_control.h>
#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/half.h"
#include "kernels/attention.h"
#include "kernels/ops.h"

#if HWY_ARCH_X86
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace sluice::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::CappedTag<float, 8>;

// Widens n elements of the cache to floats (f32 rows are used in place).
HWY_INLINE const float* widen(const float* src, int64_t, float*) { return src; }
HWY_INLINE const float* widen(const uint16_t* src, int64_t n, float* dst) {
  const DF df;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const int64_t lanes = hn::Lanes(df);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(src) + i)), df, dst + i);
  }
  for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
  return dst;
}

// Loads lanes [i, i + lanes) of a cache row as floats.
HWY_INLINE hn::Vec<DF> load_row(const float* src, int64_t i) { return hn::LoadU(DF(), src + i); }
HWY_INLINE hn::Vec<DF> load_row(const uint16_t* src, int64_t i) {
  const hn::Rebind<hwy::float16_t, DF> dh;
  return hn::PromoteTo(DF(), hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(src) + i));
}
HWY_INLINE float load_scalar(const float* src, int64_t i) { return src[i]; }
HWY_INLINE float load_scalar(const uint16_t* src, int64_t i) { return f16_to_f32(src[i]); }

// Keys scored at once: each has its own accumulator, so the FMA chains run side by side.
constexpr int kKeyTile = 8;
// Tiles of keys asked for ahead of the one scored: a tile's scores take less time than a row
// takes to arrive from memory.
constexpr int kKeyPrefetch = 4;

// s[j] = q . k[j] for kKeyTile keys. Per key: FMAs over 8-lane vectors in ascending dimension
// into one accumulator, then the lane sum ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)),
// then any scalar tail in ascending dimension.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
HWY_INLINE void score_tile(const float* q, const float* const* k, int64_t n, float* s) {
  __m256 a[kKeyTile];
  for (int j = 0; j < kKeyTile; ++j) a[j] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 qv = _mm256_loadu_ps(q + i);
    for (int j = 0; j < kKeyTile; ++j) a[j] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k[j] + i), a[j]);
  }
  // hadd(x, y) = [x0+x1, x2+x3, y0+y1, y2+y3 | x4+x5, x6+x7, y4+y5, y6+y7]
  const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  // u0 = [key 0..3 low-half sums | key 0..3 high-half sums]; the same for u1 and keys 4..7.
  _mm256_storeu_ps(s, _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31)));
  for (; i < n; ++i) {
    for (int j = 0; j < kKeyTile; ++j) s[j] += q[i] * k[j][i];
  }
}
#else
// Other targets: one key at a time, the same order within each of their vectors.
HWY_INLINE void score_tile(const float* q, const float* const* k, int64_t n, float* s) {
  const DF df;
  const int64_t lanes = hn::Lanes(df);
  for (int j = 0; j < kKeyTile; ++j) {
    auto acc = hn::Zero(df);
    int64_t i = 0;
    for (; i + lanes <= n; i += lanes) acc = hn::MulAdd(hn::LoadU(df, q + i), hn::LoadU(df, k[j] + i), acc);
    s[j] = hn::GetLane(hn::SumOfLanes(df, acc));
    for (; i < n; ++i) s[j] += q[i] * k[j][i];
  }
}
#endif

// x[0..n) = softmax(x[0..n)): the maximum (exact in any order), exp(x - max) per 8-lane vector
// with a padded last vector, a lane sum of the vector partial sums, one multiply by 1 / sum.
HWY_INLINE void softmax_row(float* x, int64_t n) {
  const DF df;
  const int64_t lanes = hn::Lanes(df);
  auto vmax = hn::Set(df, -HUGE_VALF);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) vmax = hn::Max(vmax, hn::LoadU(df, x + i));
  float max = hn::GetLane(hn::MaxOfLanes(df, vmax));
  for (int64_t j = i; j < n; ++j) max = std::max(max, x[j]);
  const auto vm = hn::Set(df, max);
  auto sum = hn::Zero(df);
  for (i = 0; i + lanes <= n; i += lanes) {
    const auto e = hn::Exp(df, hn::Sub(hn::LoadU(df, x + i), vm));
    hn::StoreU(e, df, x + i);
    sum = hn::Add(sum, e);
  }
  if (i < n) {  // pad with -inf: exp gives exactly 0
    HWY_ALIGN float tail[hn::MaxLanes(df)];
    for (int64_t j = 0; j < lanes; ++j) tail[j] = i + j < n ? x[i + j] : -HUGE_VALF;
    const auto e = hn::Exp(df, hn::Sub(hn::Load(df, tail), vm));
    hn::Store(e, df, tail);
    for (int64_t j = i; j < n; ++j) x[j] = tail[j - i];
    sum = hn::Add(sum, e);
  }
  const auto inv = hn::Set(df, 1.0f / hn::GetLane(hn::SumOfLanes(df, sum)));
  for (i = 0; i + lanes <= n; i += lanes) hn::StoreU(hn::Mul(hn::LoadU(df, x + i), inv), df, x + i);
  for (; i < n; ++i) x[i] *= hn::GetLane(inv);
}

// Heads of one GQA group handled together, at most this many (their accumulators stay in registers).
constexpr int32_t kHeadTile = 8;

// Keys per tile of the weighted sum: the tile's value rows are read from memory once and stay
// in L1 while each chunk of the head dimension takes its turn over them.
constexpr int64_t kValueTile = 16;

// Lanes [i, i + kV * lanes) of o[h] for kH heads over the keys [j0, j1): the partial sums of the
// earlier tiles are loaded (exact: stored floats), then one FMA per key in ascending position.
template <int kV, int kH, typename T>
HWY_INLINE void weighted_chunk(const float* p, const T* const* v_rows, int64_t num_keys, int64_t j0, int64_t j1,
                               int64_t i, int64_t hd, float* o) {
  const DF df;
  const int64_t lanes = hn::Lanes(df);
  hn::Vec<DF> acc[kV][kH];
  for (int c = 0; c < kV; ++c) {
    for (int h = 0; h < kH; ++h) acc[c][h] = j0 == 0 ? hn::Zero(df) : hn::LoadU(df, o + h * hd + i + c * lanes);
  }
  for (int64_t j = j0; j < j1; ++j) {
    for (int c = 0; c < kV; ++c) {
      const auto v = load_row(v_rows[j], i + c * lanes);
      for (int h = 0; h < kH; ++h) acc[c][h] = hn::MulAdd(hn::Set(df, p[h * num_keys + j]), v, acc[c][h]);
    }
  }
  for (int c = 0; c < kV; ++c) {
    for (int h = 0; h < kH; ++h) hn::StoreU(acc[c][h], df, o + h * hd + i + c * lanes);
  }
}

// o[h][i] = sum_j p[h][j] * v[j][i] for kH heads (p: [kH, num_keys], o: [kH, hd]): per lane,
// one FMA per key in ascending position; a scalar tail takes a product, then a sum.
//
// Keys go in tiles of kValueTile and the head dimension in chunks of kV vectors, so kV * kH
// accumulators run side by side (one chain of dependent FMAs would wait on each one's latency)
// and each value row is fetched once: walking all keys once per vector instead read every row
// 16 times at head_dim 128, from memory once the rows no longer fit in the caches (at ctx 512
// on Qwen3-0.6B's shape, f32 rows, a one-sequence decode step took 34.8 ms where it now takes
// 22.5). The tiling changes no lane's order of operations.
template <int kH, typename T>
HWY_INLINE void weighted_sum(const float* p, const T* const* v_rows, int64_t num_keys, int64_t hd, float* o) {
  const DF df;
  const int64_t lanes = hn::Lanes(df);
  constexpr int kV = kH >= 5 ? 1 : kH >= 3 ? 2 : 8 / kH;  // at most 8 accumulators
  const int64_t vec_end = hd / lanes * lanes;
  for (int64_t j0 = 0; j0 < num_keys; j0 += kValueTile) {
    const int64_t j1 = std::min(num_keys, j0 + kValueTile);
    for (int64_t j = j1; j < std::min(num_keys, j1 + kValueTile); ++j) {  // the next tile's rows
      const auto* row = reinterpret_cast<const uint8_t*>(v_rows[j]);
      for (size_t b = 0; b < hd * sizeof(T); b += 64) hwy::Prefetch(row + b);
    }
    int64_t i = 0;
    for (; i + kV * lanes <= vec_end; i += kV * lanes) weighted_chunk<kV, kH>(p, v_rows, num_keys, j0, j1, i, hd, o);
    for (; i < vec_end; i += lanes) weighted_chunk<1, kH>(p, v_rows, num_keys, j0, j1, i, hd, o);
  }
  for (int64_t i = vec_end; i < hd; ++i) {
    for (int h = 0; h < kH; ++h) {
      float a = 0;
      for (int64_t j = 0; j < num_keys; ++j) {
        const float prod = p[h * num_keys + j] * load_scalar(v_rows[j], i);
        a += prod;
      }
      o[h * hd + i] = a;
    }
  }
}

template <typename T>
void attend(const AttentionShape& shape, const AttentionBatch& batch, const PagedKv& kv, float* out, int64_t begin,
            int64_t end) {
  const int64_t hd = shape.head_dim;
  const int64_t q_dim = int64_t{shape.num_heads} * hd;
  const int32_t group = shape.num_heads / shape.num_kv_heads;
  const T* k_cache = static_cast<const T*>(kv.k);
  const T* v_cache = static_cast<const T*>(kv.v);
  std::vector<float> scores, k_rows(kKeyTile * hd);
  std::vector<const T*> v_rows;
  std::vector<int64_t> rows;
  for (int64_t item = begin; item < end; ++item) {
    const int64_t t = item / shape.num_kv_heads;
    const int64_t g = item % shape.num_kv_heads;
    const int32_t* table = batch.block_table + int64_t{batch.seq_idx[t]} * batch.max_blocks_per_seq;
    const int64_t num_keys = int64_t{batch.positions[t]} + 1;
    // Position -> where its row of kv head g starts, block by block (no division per key).
    rows.resize(num_keys);
    for (int64_t j0 = 0, blk = 0; j0 < num_keys; j0 += kv.block_size, ++blk) {
      const int64_t base = kv_row_offset(shape, kv.block_size, kv.num_blocks, table[blk], g, 0);
      const int64_t stop = std::min<int64_t>(num_keys, j0 + kv.block_size);
      for (int64_t j = j0; j < stop; ++j) rows[j] = base + (j - j0) * hd;
    }
    const float* q = batch.q + t * q_dim + g * group * hd;
    scores.resize(group * num_keys);
    // The cache rows come from memory (a step streams all the weights through the caches in
    // between): prefetch the next tile's keys, and this tile's values for the sums below.
    const size_t row_bytes = static_cast<size_t>(hd) * sizeof(T);
    auto prefetch_rows = [&](const T* cache, int64_t j_begin, int64_t j_end) {
      for (int64_t j = j_begin; j < std::min(j_end, num_keys); ++j) {
        const auto* row = reinterpret_cast<const uint8_t*>(cache + rows[j]);
        for (size_t b = 0; b < row_bytes; b += 64) hwy::Prefetch(row + b);
        hwy::Prefetch(row + row_bytes - 1);
      }
    };
    prefetch_rows(k_cache, 0, kKeyPrefetch * kKeyTile);
    // Scores, kKeyTile keys at a time; a short last tile repeats its last key.
    for (int64_t j0 = 0; j0 < num_keys; j0 += kKeyTile) {
      const int nk = static_cast<int>(std::min<int64_t>(kKeyTile, num_keys - j0));
      prefetch_rows(k_cache, j0 + kKeyPrefetch * kKeyTile, j0 + (kKeyPrefetch + 1) * kKeyTile);
      prefetch_rows(v_cache, j0, j0 + kKeyTile);
      const float* k[kKeyTile];
      for (int j = 0; j < kKeyTile; ++j) {
        k[j] = j < nk ? widen(k_cache + rows[j0 + j], hd, k_rows.data() + j * hd) : k[nk - 1];
      }
      for (int32_t h = 0; h < group; ++h) {
        float s[kKeyTile];
        score_tile(q + h * hd, k, hd, s);
        for (int j = 0; j < nk; ++j) scores[h * num_keys + j0 + j] = s[j] * shape.scale;
      }
    }
    for (int32_t h = 0; h < group; ++h) softmax_row(&scores[h * num_keys], num_keys);
    // Outputs: o[h] = sum_j p[h][j] * v[j], one FMA per key in ascending position, per lane
    // (weighted_sum: tiles of keys, each value row fetched once for all heads).
    v_rows.resize(num_keys);
    for (int64_t j = 0; j < num_keys; ++j) v_rows[j] = v_cache + rows[j];
    float* o = out + t * q_dim + g * group * hd;
    for (int32_t h0 = 0; h0 < group; h0 += kHeadTile) {
      const int32_t nh = std::min(kHeadTile, group - h0);
      const float* p = &scores[h0 * num_keys];
      float* oh = o + h0 * hd;
      switch (nh) {  // a constant head count keeps the accumulators in registers
        case 8: weighted_sum<8>(p, v_rows.data(), num_keys, hd, oh); break;
        case 7: weighted_sum<7>(p, v_rows.data(), num_keys, hd, oh); break;
        case 6: weighted_sum<6>(p, v_rows.data(), num_keys, hd, oh); break;
        case 5: weighted_sum<5>(p, v_rows.data(), num_keys, hd, oh); break;
        case 4: weighted_sum<4>(p, v_rows.data(), num_keys, hd, oh); break;
        case 3: weighted_sum<3>(p, v_rows.data(), num_keys, hd, oh); break;
        case 2: weighted_sum<2>(p, v_rows.data(), num_keys, hd, oh); break;
        default: weighted_sum<1>(p, v_rows.data(), num_keys, hd, oh); break;
      }
    }
  }
}

void AttendRange(const AttentionShape& shape, const AttentionBatch& batch, const PagedKv& kv, float* out,
                 int64_t begin, int64_t end) {
  if (kv.type == KvType::kF16) {
    attend<uint16_t>(shape, batch, kv, out, begin, end);
  } else {
    attend<float>(shape, batch, kv, out, begin, end);
  }
}

void StoreF16(const float* src, int64_t n, uint16_t* dst) {
  const DF df;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const int64_t lanes = hn::Lanes(df);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(hn::DemoteTo(dh, hn::LoadU(df, src + i)), dh, reinterpret_cast<hwy::float16_t*>(dst) + i);
  }
  for (; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

}  // namespace HWY_NAMESPACE
}  // namespace sluice::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <cstring>

namespace sluice::kernels {

HWY_EXPORT(AttendRange);
HWY_EXPORT(StoreF16);

std::string_view kv_type_name(KvType t) { return t == KvType::kF16 ? "f16" : "f32"; }
size_t kv_type_size(KvType t) { return t == KvType::kF16 ? 2 : 4; }

void paged_attention(ThreadPool& pool, const AttentionShape& shape, const AttentionBatch& batch, const PagedKv& kv,
                     float* out) {
  auto fn = HWY_DYNAMIC_DISPATCH(AttendRange);
  pool.parallel_for(batch.num_tokens * shape.num_kv_heads,
                    [&](int64_t begin, int64_t end) { fn(shape, batch, kv, out, begin, end); });
}

void store_kv_token(KvType type, const AttentionShape& s, int32_t block_size, int64_t num_blocks, int64_t slot,
                    const float* src, void* cache) {
  const size_t esize = kv_type_size(type);
  for (int32_t h = 0; h < s.num_kv_heads; ++h) {
    const int64_t at = kv_row_offset(s, block_size, num_blocks, slot / block_size, h, slot % block_size);
    store_kv(type, src + int64_t{h} * s.head_dim, s.head_dim, static_cast<uint8_t*>(cache) + at * esize);
  }
}

void store_kv(KvType type, const float* src, int64_t n, void* dst) {
  if (type == KvType::kF16) {
    HWY_DYNAMIC_DISPATCH(StoreF16)(src, n, static_cast<uint16_t*>(dst));
  } else {
    std::memcpy(dst, src, n * sizeof(float));
  }
}

}  // namespace sluice::kernels
#endif  // HWY_ONCE
