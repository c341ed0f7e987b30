// Highway compiles this file once per SIMD target and dispatches at run time (as matmul.cc).
//
// For one (token, head) the arithmetic is fixed by head_dim alone: each score is a dot product
// over 8-lane vectors in ascending dimension with one lane reduction, then a scalar tail;
// softmax over the scores in ascending position; the output accumulates p_j * v_j in ascending
// position. Nothing depends on the batch, the block placement or the thread split.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <vector>

#include "common/half.h"
#include "kernels/attention.h"
#include "kernels/ops.h"

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

HWY_INLINE float dot(const float* a, const float* b, int64_t n) {
  const DF df;
  const int64_t lanes = hn::Lanes(df);
  auto acc = hn::Zero(df);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) acc = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), acc);
  float s = hn::GetLane(hn::SumOfLanes(df, acc));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// o[i] += p * v[i]
HWY_INLINE void axpy(float p, const float* v, int64_t n, float* o) {
  const DF df;
  const int64_t lanes = hn::Lanes(df);
  const auto vp = hn::Set(df, p);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(hn::MulAdd(vp, hn::LoadU(df, v + i), hn::LoadU(df, o + i)), df, o + i);
  for (; i < n; ++i) o[i] += p * v[i];
}

template <typename T>
void attend(const AttentionShape& shape, const AttentionBatch& batch, const PagedKv& kv, float* out, int64_t begin,
            int64_t end) {
  const int64_t hd = shape.head_dim;
  const int64_t kv_dim = int64_t{shape.num_kv_heads} * hd;
  const int64_t q_dim = int64_t{shape.num_heads} * hd;
  const int32_t group = shape.num_heads / shape.num_kv_heads;
  const T* k_cache = static_cast<const T*>(kv.k);
  const T* v_cache = static_cast<const T*>(kv.v);
  std::vector<float> scores, row(hd);
  for (int64_t item = begin; item < end; ++item) {
    const int64_t t = item / shape.num_kv_heads;
    const int64_t g = item % shape.num_kv_heads;
    const int32_t* table = batch.block_table + int64_t{batch.seq_idx[t]} * batch.max_blocks_per_seq;
    const int64_t num_keys = int64_t{batch.positions[t]} + 1;
    auto slot = [&](int64_t pos) { return int64_t{table[pos / kv.block_size]} * kv.block_size + pos % kv.block_size; };
    const float* q = batch.q + t * q_dim + g * group * hd;
    scores.resize(group * num_keys);
    for (int64_t j = 0; j < num_keys; ++j) {
      const float* k = widen(k_cache + slot(j) * kv_dim + g * hd, hd, row.data());
      for (int32_t h = 0; h < group; ++h) scores[h * num_keys + j] = dot(q + h * hd, k, hd) * shape.scale;
    }
    for (int32_t h = 0; h < group; ++h) softmax(&scores[h * num_keys], num_keys);
    float* o = out + t * q_dim + g * group * hd;
    std::fill(o, o + group * hd, 0.0f);
    for (int64_t j = 0; j < num_keys; ++j) {
      const float* v = widen(v_cache + slot(j) * kv_dim + g * hd, hd, row.data());
      for (int32_t h = 0; h < group; ++h) axpy(scores[h * num_keys + j], v, hd, o + h * hd);
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

void store_kv(KvType type, const float* src, int64_t n, void* dst) {
  if (type == KvType::kF16) {
    HWY_DYNAMIC_DISPATCH(StoreF16)(src, n, static_cast<uint16_t*>(dst));
  } else {
    std::memcpy(dst, src, n * sizeof(float));
  }
}

}  // namespace sluice::kernels
#endif  // HWY_ONCE
