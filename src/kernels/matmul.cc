// Highway compiles this file once per SIMD target (foreach_target.h) and dispatches at run time.
//
// Kernel shape: the pool splits output rows into chunks. Inside a chunk, tokens go in tiles of up
// to kTile and rows in groups of kR; each weight vector loaded is multiplied into the
// accumulators of every token of the tile. For one (row, token), the dot product runs over
// fixed-width vectors in ascending k into one accumulator, then a fixed lane reduction, then any
// scalar tail: the same order for every tile shape.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matmul.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cstring>

#include "common/half.h"
#include "kernels/matmul.h"
#include "kernels/matmul_q8.h"

HWY_BEFORE_NAMESPACE();
namespace sluice::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int kTile = 4;
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
// accumulators hide FMA latency (decode has kN = 1, so it takes kR = 4 rows); each accumulator
// still sees the same FMAs in the same order as in any other tile shape.

// Dense types: acc[r][t] += w[r][k] * x[t][k] over the row.
template <typename T, int kR, int kN>
HWY_INLINE void tile_dense(const uint8_t* const* w, const float* const* x, int64_t cols, float (*out)[kTile]) {
  const DF d;
  const int64_t lanes = hn::Lanes(d);
  hn::Vec<DF> acc[kR][kN];
  for (int r = 0; r < kR; ++r)
    for (int t = 0; t < kN; ++t) acc[r][t] = hn::Zero(d);
  int64_t k = 0;
  for (; k + lanes <= cols; k += lanes) {
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
HWY_INLINE void tile(const WeightView& w, int64_t n, const float* const* x, float (*out)[kTile]) {
  const uint8_t* rows[kR];
  for (int r = 0; r < kR; ++r) rows[r] = w.row(n + r);
  switch (w.type) {
    case gguf::TensorType::kF32: tile_dense<float, kR, kN>(rows, x, w.cols, out); break;
    case gguf::TensorType::kF16: tile_dense<hwy::float16_t, kR, kN>(rows, x, w.cols, out); break;
    case gguf::TensorType::kBF16: tile_dense<hwy::bfloat16_t, kR, kN>(rows, x, w.cols, out); break;
    default: break;
  }
}

// Rows [n, row_end) for kN tokens: kR rows at a time, then single rows.
template <int kR, int kN>
HWY_INLINE void tile_rows(const WeightView& w, int64_t n, int64_t row_end, const float* const* x, float* y,
                          int64_t t0) {
  float out[kTile][kTile] = {};
  auto store = [&](int64_t row, int num_rows) {
    for (int r = 0; r < num_rows; ++r)
      for (int t = 0; t < kN; ++t) y[(t0 + t) * w.rows + row + r] = out[r][t];
  };
  for (; n + kR <= row_end; n += kR) {
    tile<kR, kN>(w, n, x, out);
    store(n, kR);
  }
  for (; n < row_end; ++n) {
    tile<1, kN>(w, n, x, out);
    store(n, 1);
  }
}

void MatmulRows(const WeightView& w, const float* x, int64_t num_tokens, float* y, int64_t row_begin,
                int64_t row_end) {
  for (int64_t t0 = 0; t0 < num_tokens; t0 += kTile) {
    const int n_tile = static_cast<int>(std::min<int64_t>(kTile, num_tokens - t0));
    const float* xs[kTile];
    for (int t = 0; t < n_tile; ++t) xs[t] = x + (t0 + t) * w.cols;
    switch (n_tile) {
      case 4: tile_rows<2, 4>(w, row_begin, row_end, xs, y, t0); break;
      case 3: tile_rows<2, 3>(w, row_begin, row_end, xs, y, t0); break;
      case 2: tile_rows<4, 2>(w, row_begin, row_end, xs, y, t0); break;
      default: tile_rows<4, 1>(w, row_begin, row_end, xs, y, t0); break;
    }
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
    case gguf::TensorType::kBF16: case gguf::TensorType::kQ8_0:
      return true;
    default:
      return false;
  }
}

void matmul(ThreadPool& pool, const WeightView& w, const float* x, int64_t num_tokens, float* y) {
  if (w.type == gguf::TensorType::kQ8_0) {
    matmul_q8_0(pool, w, x, num_tokens, y);
    return;
  }
  // Chunks of rows small enough that a chunk's weights stay in L2 while every token tile
  // passes over them.
  const int64_t grain = std::max<int64_t>(4, (int64_t{64} << 10) / std::max<size_t>(1, w.row_bytes()));
  auto fn = HWY_DYNAMIC_DISPATCH(MatmulRows);
  pool.parallel_for(w.rows, [&](int64_t b, int64_t e) { fn(w, x, num_tokens, y, b, e); }, grain);
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
    default: break;
  }
}

const char* simd_target_name() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }

}  // namespace sluice::kernels
#endif  // HWY_ONCE
