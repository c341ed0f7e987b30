// Highway compiles this file once per SIMD target (foreach_target.h) and dispatches at run time.
//
// Kernel shape: the pool splits output rows into chunks. Inside a chunk, rows go in groups of kR
// (8 for one token, else 4) and, for each group, tokens in tiles of up to kTile = 3, so that a
// group's weights come from memory once and from cache for the other tiles; each weight vector
// loaded (and widened to f32) is multiplied into the accumulators of every token of the tile.
// For one (row, token), the dot product runs over fixed-width vectors in ascending k into one
// accumulator, then a fixed lane reduction, then any scalar tail: the same order for every tile
// shape. Q8_0 weights go to matmul_q8.cc.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matmul.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "common/half.h"
#include "kernels/matmul.h"
#include "kernels/kernel_path.h"
#include "kernels/matmul_amx.h"
#include "kernels/matmul_q8.h"
#include "kernels/quant_blocks.h"

HWY_BEFORE_NAMESPACE();
namespace sluice::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int kTile = 3;     // most tokens per tile
constexpr int kMaxRows = 8;  // most rows per tile
// Groups of rows up to this size prefetch the next group; longer rows are left to the hardware
// prefetcher, which follows them better than a prefetch a whole group ahead.
constexpr size_t kPrefetchGroupMax = 16 << 10;
// At most 8 lanes: the lane count is part of the reduction order, and capping it keeps
// results identical across AVX2 and AVX-512 machines too (narrower targets differ).
using DF = hn::CappedTag<float, 8>;

template <class D>
HWY_INLINE float reduce(D d, hn::Vec<D> v) {
  return hn::GetLane(hn::SumOfLanes(d, v));
}

// Loads lanes of weight type T at p as floats.
template <typename T>
struct Loader;
template <>
struct Loader<float> {
  static HWY_INLINE hn::Vec<DF> load(DF d, const uint8_t* p) {
    return hn::LoadU(d, reinterpret_cast<const float*>(p));
  }
  static float scalar(const uint8_t* p) { float v; std::memcpy(&v, p, 4); return v; }
};
template <>
struct Loader<hwy::float16_t> {
  static HWY_INLINE hn::Vec<DF> load(DF d, const uint8_t* p) {
    hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
  }
  static float scalar(const uint8_t* p) { uint16_t v; std::memcpy(&v, p, 2); return f16_to_f32(v); }
};
template <>
struct Loader<hwy::bfloat16_t> {
  static HWY_INLINE hn::Vec<DF> load(DF d, const uint8_t* p) {
    hn::Rebind<uint16_t, DF> du16;
    hn::Rebind<uint32_t, DF> du32;
    auto bits = hn::PromoteTo(du32, hn::LoadU(du16, reinterpret_cast<const uint16_t*>(p)));
    return hn::BitCast(d, hn::ShiftLeft<16>(bits));
  }
  static float scalar(const uint8_t* p) { uint16_t v; std::memcpy(&v, p, 2); return bf16_to_f32(v); }
};

// A tile is kR weight rows times kN tokens, with one accumulator per (row, token). More
// accumulators hide FMA latency (decode has kN = 1, so it takes kR = 8 rows); each accumulator
// still sees the same FMAs in the same order as in any other tile shape.

// Dense types: acc[r][t] += w[r][k] * x[t][k] over the row.
// Unless prefetch_bytes is 0, also prefetches each row that many bytes further on, so that
// memory requests are in flight while the tile computes.
template <typename T, int kR, int kN>
HWY_INLINE void tile_dense(const uint8_t* const* w, const float* const* x, int64_t cols, size_t prefetch_bytes,
                           float (*out)[kTile]) {
  const DF d;
  const int64_t lanes = hn::Lanes(d);
  hn::Vec<DF> acc[kR][kN];
  for (int r = 0; r < kR; ++r)
    for (int t = 0; t < kN; ++t) acc[r][t] = hn::Zero(d);
  int64_t k = 0;
  for (; k + lanes <= cols; k += lanes) {
    if (prefetch_bytes != 0 && (k * sizeof(T)) % 64 == 0) {
      for (int r = 0; r < kR; ++r) hwy::Prefetch(w[r] + k * sizeof(T) + prefetch_bytes);
    }
    hn::Vec<DF> xv[kN];
    for (int t = 0; t < kN; ++t) xv[t] = hn::LoadU(d, x[t] + k);
    for (int r = 0; r < kR; ++r) {
      const auto wv = Loader<T>::load(d, w[r] + k * sizeof(T));
      for (int t = 0; t < kN; ++t) acc[r][t] = hn::MulAdd(wv, xv[t], acc[r][t]);
    }
  }
  for (int r = 0; r < kR; ++r) {
    for (int t = 0; t < kN; ++t) {
      float s = reduce(d, acc[r][t]);
      for (int64_t j = k; j < cols; ++j) s += Loader<T>::scalar(w[r] + j * sizeof(T)) * x[t][j];
      out[r][t] = s;
    }
  }
}

template <int kR, int kN>
HWY_INLINE void tile(const WeightView& w, int64_t n, const float* const* x, size_t pf, float (*out)[kTile]) {
  const uint8_t* rows[kR];
  for (int r = 0; r < kR; ++r) rows[r] = w.row(n + r);
  switch (w.type) {
    case gguf::TensorType::kF32: tile_dense<float, kR, kN>(rows, x, w.cols, pf, out); break;
    case gguf::TensorType::kF16: tile_dense<hwy::float16_t, kR, kN>(rows, x, w.cols, pf, out); break;
    case gguf::TensorType::kBF16: tile_dense<hwy::bfloat16_t, kR, kN>(rows, x, w.cols, pf, out); break;
    default: break;
  }
}

// Rows [row_begin, row_end) for all tokens: kR rows at a time (then single rows), and for each
// group of rows every token tile, so that the group's weights are read from memory once and then
// from cache. Tiles of kN = 3 tokens: 4 x 3 accumulators, 3 token vectors and a weight vector
// fill the 16 vector registers of AVX2.
template <int kR>
HWY_INLINE void row_groups(const WeightView& w, const float* x, int64_t num_tokens, float* y, int64_t row_begin,
                           int64_t row_end) {
  constexpr int kN = kTile;
  float out[kMaxRows][kTile] = {};
  auto token_tiles = [&](auto num_rows_tag, int64_t n) {
    constexpr int kRows = decltype(num_rows_tag)::value;
    // The first token tile prefetches the same place in the next group of rows, unless rows
    // are long enough for the hardware prefetcher to follow them.
    const size_t group_bytes = kRows * w.row_bytes();
    const size_t prefetch_bytes = group_bytes <= kPrefetchGroupMax ? group_bytes : 0;
    auto run = [&](auto num_tokens_tag, int64_t t0) {
      constexpr int kTokens = decltype(num_tokens_tag)::value;
      const float* xs[kTile];
      for (int t = 0; t < kTokens; ++t) xs[t] = x + (t0 + t) * w.cols;
      tile<kRows, kTokens>(w, n, xs, t0 == 0 ? prefetch_bytes : 0, out);
      for (int r = 0; r < kRows; ++r)
        for (int t = 0; t < kTokens; ++t) y[(t0 + t) * w.rows + n + r] = out[r][t];
    };
    // Tiles of kN = 3; a remainder of one after at least one full tile becomes two tiles of
    // two (a one-token tile pays a weight conversion per FMA).
    int64_t t0 = 0;
    const int64_t end3 = num_tokens % kN == 1 && num_tokens > kN ? num_tokens - 4 : num_tokens;
    for (; t0 + kN <= end3; t0 += kN) run(std::integral_constant<int, kN>{}, t0);
    for (; t0 + 2 <= num_tokens; t0 += 2) run(std::integral_constant<int, 2>{}, t0);
    if (t0 < num_tokens) run(std::integral_constant<int, 1>{}, t0);
  };
  int64_t n = row_begin;
  for (; n + kR <= row_end; n += kR) token_tiles(std::integral_constant<int, kR>{}, n);
  for (; n < row_end; ++n) token_tiles(std::integral_constant<int, 1>{}, n);
}

void MatmulRows(const WeightView& w, const float* x, int64_t num_tokens, float* y, int64_t row_begin,
                int64_t row_end) {
  // One token has one accumulator per row: 8 rows keep the FMA units busy.
  if (num_tokens == 1) {
    row_groups<8>(w, x, num_tokens, y, row_begin, row_end);
  } else {
    row_groups<4>(w, x, num_tokens, y, row_begin, row_end);
  }
}

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace sluice::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace sluice::kernels {

HWY_EXPORT(MatmulRows);
HWY_EXPORT(TargetName);

size_t WeightView::row_bytes() const {
  switch (type) {  // on the hot path (row()): no table look-up
    case gguf::TensorType::kF32: return static_cast<size_t>(cols) * 4;
    case gguf::TensorType::kF16: case gguf::TensorType::kBF16: return static_cast<size_t>(cols) * 2;
    case gguf::TensorType::kQ8_0: return static_cast<size_t>(cols / gguf::kQ8_0BlockSize) * sizeof(gguf::BlockQ8_0);
    default: {
      auto traits = gguf::tensor_type_traits(static_cast<uint32_t>(type));
      return static_cast<size_t>(cols / traits->block_size * traits->type_size);
    }
  }
}

bool weight_type_supported(gguf::TensorType type) {
  switch (type) {
    case gguf::TensorType::kF32: case gguf::TensorType::kF16:
    case gguf::TensorType::kBF16:
      return true;
    default:
      return is_block_quant(type);
  }
}

void matmul(ThreadPool& pool, const WeightView& w, const float* x, int64_t num_tokens, float* y) {
  const MatmulTarget target{w, y};
  matmul_multi(pool, {&target, 1}, x, num_tokens);
}

void matmul_multi(ThreadPool& pool, std::span<const MatmulTarget> targets, const float* x, int64_t num_tokens) {
  if (targets.empty()) return;
  const gguf::TensorType type = targets[0].w.type;
  const bool same_type =
      std::all_of(targets.begin(), targets.end(), [&](const MatmulTarget& t) { return t.w.type == type; });
  if (!same_type) {  // one loop per type would need its own layout: one call per target
    for (const MatmulTarget& t : targets) matmul_multi(pool, {&t, 1}, x, num_tokens);
    return;
  }
  if (type == gguf::TensorType::kQ8_0 && quant_route(targets, num_tokens) == QuantRoute::kVector) {
    matmul_q8_0(pool, targets, x, num_tokens);
    return;
  }
  if (is_block_quant(type)) {
    matmul_quant(pool, targets, x, num_tokens);
    return;
  }
  // Chunks of rows small enough that a chunk's weights stay in L2 while every token tile
  // passes over them.
  const int64_t grain = std::max<int64_t>(4, (int64_t{64} << 10) / std::max<size_t>(1, targets[0].w.row_bytes()));
  auto fn = HWY_DYNAMIC_DISPATCH(MatmulRows);
  parallel_over_targets(
      pool, targets, [](const WeightView& w) { return w.rows; }, grain,
      [&](size_t i, int64_t begin, int64_t end) { fn(targets[i].w, x, num_tokens, targets[i].y, begin, end); });
}

void dequantize_row(const WeightView& w, int64_t n, float* out) {
  const uint8_t* row = w.row(n);
  switch (w.type) {
    case gguf::TensorType::kF32: std::memcpy(out, row, w.cols * sizeof(float)); break;
    case gguf::TensorType::kF16:
      for (int64_t k = 0; k < w.cols; ++k) { uint16_t h; std::memcpy(&h, row + 2 * k, 2); out[k] = f16_to_f32(h); }
      break;
    case gguf::TensorType::kBF16:
      for (int64_t k = 0; k < w.cols; ++k) { uint16_t h; std::memcpy(&h, row + 2 * k, 2); out[k] = bf16_to_f32(h); }
      break;
    case gguf::TensorType::kQ8_0:
      for (int64_t b = 0; b < w.cols / gguf::kQ8_0BlockSize; ++b) {
        const auto* block = reinterpret_cast<const gguf::BlockQ8_0*>(row + b * sizeof(gguf::BlockQ8_0));
        uint16_t dh;
        std::memcpy(&dh, &block->d, 2);
        float d = f16_to_f32(dh);
        for (int j = 0; j < gguf::kQ8_0BlockSize; ++j) out[b * gguf::kQ8_0BlockSize + j] = d * block->qs[j];
      }
      break;
    default:
      if (is_block_quant(w.type)) {
        for (int64_t b = 0; b < w.cols / kSubBlock; ++b) dequantize_block32(w.type, row, b, out + b * kSubBlock);
      }
      break;
  }
}

const char* simd_target_name() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }

}  // namespace sluice::kernels
#endif  // HWY_ONCE
