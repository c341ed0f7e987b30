// Q8_0 matmul with integer dot products, compiled per SIMD target like matmul.cc.
//
// Activations are quantized per token and per block of 32 to int8-range values (kept as int16)
// with one float scale: dx = max|x| / 127, qx = round(x / dx). A block's dot product is then
// exact in int32 (sum of qw * qx, widened multiply-add), and the float accumulator takes
// acc += (dw * dx) * block_sum in ascending block order. Integer sums do not depend on order,
// and everything else is per token, so results stay bit-identical whatever the batch.
//
// Error against the dequantized weights times the unquantized activations is bounded by
// sum_k |w_k| * dx_k / 2, the activation rounding (the kernel test checks that bound).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matmul_q8.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/matmul_q8.h"

HWY_BEFORE_NAMESPACE();
namespace sluice::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int kTile = 4;     // tokens per tile (kN)
constexpr int kMaxRows = 8;  // rows per tile (kR)
constexpr int kBlock = gguf::kQ8_0BlockSize;
// Each row is read this many blocks ahead (~1 KiB), keeping more memory requests in flight.
constexpr int kPrefetchBlocks = 32;
using DF = hn::CappedTag<float, 8>;

HWY_INLINE float half_to_float(const uint16_t* p) {
  const hn::CappedTag<float, 1> d1;
  const hn::Rebind<hwy::float16_t, decltype(d1)> dh1;
  return hn::GetLane(hn::PromoteTo(d1, hn::LoadU(dh1, reinterpret_cast<const hwy::float16_t*>(p))));
}

#if HWY_TARGET == HWY_SCALAR
// The scalar target has no widening pairs: plain integer dot products, same arithmetic.
template <int kR, int kN>
HWY_INLINE void tile(const uint8_t* const* w, const QuantizedActivations& xq, const int64_t* tokens, int64_t cols,
                     float (*out)[kTile]) {
  const int64_t num_blocks = cols / kBlock;
  for (int r = 0; r < kR; ++r) {
    for (int t = 0; t < kN; ++t) {
      const int16_t* x = xq.q.data() + tokens[t] * cols;
      const float* ds = xq.d.data() + tokens[t] * num_blocks;
      float acc = 0;
      for (int64_t b = 0; b < num_blocks; ++b) {
        const auto* block = reinterpret_cast<const gguf::BlockQ8_0*>(w[r] + b * sizeof(gguf::BlockQ8_0));
        int32_t sum = 0;
        for (int j = 0; j < kBlock; ++j) sum += int32_t{block->qs[j]} * x[b * kBlock + j];
        acc += half_to_float(&block->d) * ds[b] * static_cast<float>(sum);
      }
      out[r][t] = acc;
    }
  }
}
#else
// out[r][t] = dot of weight rows w[r] with quantized tokens x[t].
template <int kR, int kN>
HWY_INLINE void tile(const uint8_t* const* w, const QuantizedActivations& xq, const int64_t* tokens, int64_t cols,
                     float (*out)[kTile]) {
  const DF df;
  const hn::Rebind<int32_t, DF> d32;
  const hn::Repartition<int16_t, decltype(d32)> d16;  // twice the lanes of d32
  const hn::Rebind<int8_t, decltype(d16)> d8;
  const int64_t lanes16 = hn::Lanes(d16);
  const int64_t num_blocks = cols / kBlock;
  hn::Vec<DF> acc[kR][kN];
  for (int r = 0; r < kR; ++r)
    for (int t = 0; t < kN; ++t) acc[r][t] = hn::Zero(df);
  const int16_t* xs[kN];
  const float* ds[kN];
  for (int t = 0; t < kN; ++t) {
    xs[t] = xq.q.data() + tokens[t] * cols;
    ds[t] = xq.d.data() + tokens[t] * num_blocks;
  }
  // One row at a time inside a block, so only kN int32 sums are live next to the kR * kN
  // float accumulators; token vectors are re-read from L1 for each row.
  for (int64_t b = 0; b < num_blocks; ++b) {
    for (int r = 0; r < kR; ++r) {
      const auto* block = reinterpret_cast<const gguf::BlockQ8_0*>(w[r] + b * sizeof(gguf::BlockQ8_0));
      hwy::Prefetch(block + kPrefetchBlocks);
      hn::Vec<decltype(d32)> sum[kN];
      for (int t = 0; t < kN; ++t) sum[t] = hn::Zero(d32);
      for (int64_t j = 0; j < kBlock; j += lanes16) {
        const auto wv = hn::PromoteTo(d16, hn::LoadU(d8, block->qs + j));
        for (int t = 0; t < kN; ++t) {
          auto unused = hn::Zero(d32);
          sum[t] = hn::ReorderWidenMulAccumulate(d32, wv, hn::LoadU(d16, xs[t] + b * kBlock + j), sum[t], unused);
        }
      }
      const float dw = half_to_float(&block->d);
      for (int t = 0; t < kN; ++t) {
        acc[r][t] = hn::MulAdd(hn::Set(df, dw * ds[t][b]), hn::ConvertTo(df, sum[t]), acc[r][t]);
      }
    }
  }
  for (int r = 0; r < kR; ++r)
    for (int t = 0; t < kN; ++t) out[r][t] = hn::GetLane(hn::SumOfLanes(df, acc[r][t]));
}
#endif  // HWY_TARGET == HWY_SCALAR

template <int kR, int kN>
HWY_INLINE void tile_rows(const WeightView& w, int64_t n, int64_t row_end, const QuantizedActivations& xq,
                          const int64_t* tokens, float* y) {
  float out[kMaxRows][kTile] = {};
  const uint8_t* rows[kMaxRows];
  auto store = [&](int64_t row, int num_rows) {
    for (int r = 0; r < num_rows; ++r)
      for (int t = 0; t < kN; ++t) y[tokens[t] * w.rows + row + r] = out[r][t];
  };
  for (; n + kR <= row_end; n += kR) {
    for (int r = 0; r < kR; ++r) rows[r] = w.row(n + r);
    tile<kR, kN>(rows, xq, tokens, w.cols, out);
    store(n, kR);
  }
  for (; n < row_end; ++n) {
    rows[0] = w.row(n);
    tile<1, kN>(rows, xq, tokens, w.cols, out);
    store(n, 1);
  }
}

// Tile shapes keep kR * kN float accumulators, kN int32 sums and two temporaries within the 16
// vector registers of AVX2.
void MatmulQ8Rows(const WeightView& w, const QuantizedActivations& xq, int64_t num_tokens, float* y,
                  int64_t row_begin, int64_t row_end) {
  for (int64_t t0 = 0; t0 < num_tokens; t0 += kTile) {
    const int n_tile = static_cast<int>(std::min<int64_t>(kTile, num_tokens - t0));
    int64_t tokens[kTile];
    for (int t = 0; t < n_tile; ++t) tokens[t] = t0 + t;
    switch (n_tile) {
      case 4: tile_rows<2, 4>(w, row_begin, row_end, xq, tokens, y); break;
      case 3: tile_rows<3, 3>(w, row_begin, row_end, xq, tokens, y); break;
      case 2: tile_rows<4, 2>(w, row_begin, row_end, xq, tokens, y); break;
      default: tile_rows<8, 1>(w, row_begin, row_end, xq, tokens, y); break;
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace sluice::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace sluice::kernels {

HWY_EXPORT(MatmulQ8Rows);

void quantize_activations(const float* x, int64_t num_tokens, int64_t cols, QuantizedActivations& out) {
  const int64_t num_blocks = cols / gguf::kQ8_0BlockSize;
  out.q.resize(num_tokens * cols);
  out.d.resize(num_tokens * num_blocks);
  for (int64_t i = 0; i < num_tokens * num_blocks; ++i) {
    const float* xb = x + i * gguf::kQ8_0BlockSize;
    float amax = 0;
    for (int j = 0; j < gguf::kQ8_0BlockSize; ++j) amax = std::max(amax, std::abs(xb[j]));
    const float d = amax / 127.0f;
    const float inv = d > 0 ? 1.0f / d : 0.0f;
    out.d[i] = d;
    for (int j = 0; j < gguf::kQ8_0BlockSize; ++j) {
      out.q[i * gguf::kQ8_0BlockSize + j] = static_cast<int16_t>(std::nearbyint(xb[j] * inv));
    }
  }
}

void matmul_q8_0(ThreadPool& pool, const WeightView& w, const float* x, int64_t num_tokens, float* y) {
  QuantizedActivations xq;
  quantize_activations(x, num_tokens, w.cols, xq);
  const int64_t grain = std::max<int64_t>(4, (int64_t{64} << 10) / std::max<size_t>(1, w.row_bytes()));
  auto fn = HWY_DYNAMIC_DISPATCH(MatmulQ8Rows);
  pool.parallel_for(w.rows, [&](int64_t b, int64_t e) { fn(w, xq, num_tokens, y, b, e); }, grain);
}

}  // namespace sluice::kernels
#endif  // HWY_ONCE
