// Matmul for the block-quantized types of quant_blocks.h (Q4_0 ... IQ4_XS), compiled per SIMD
// target like matmul_q8.cc. Activations are quantized as the type's integer dot product needs,
// as ggml does (its Q8_0 and Q8_K activation blocks): int8 with one float scale dx per block of
// the weight type's own size, 32 elements or a super-block of 256, plus the integer sum of each
// 16 quantized values (the min terms need it).
//
// For every (row, token) and block p of the weight type, ascending, the float work is
//
//   acc = fma(d[p] * dx[p], float(isum[p]), acc);
//   acc = fma(dmin[p] * dx[p], float(msum[p]), acc);      (types with a min only)
//
// where isum[p] and msum[p] are quant_blocks.h's integer sums over all of the block's sub-blocks
// (one for the 32-element types, eight for a super-block: |isum| < 2^28). They are exact
// integers, so how a tile reaches them is free, and a token's result is bit-identical whatever
// the batch, the tile it lands in, or the thread split.
//
// Measured on ../shared/models/quant (quant_reference_test.cc): with activations per 32 for the
// super-block types too, sluice was closer to the F32 model in median (Q6_K 0.788 against 0.809)
// but agreed less often on the top-1 token (Q5_K_M 462 of 721 positions against llama.cpp's
// 476); per 256 as ggml, 0.809 and 476-477. The difference is the noise of rounding activations
// differently (any two implementations differ by ~0.25 there), but per 256 also makes the float
// work per super-block one step instead of eight.
//
// Kernel shape: rows go in groups of 8 (one float vector holds a token's 8 rows). For each chunk
// of up to 32 sub-blocks, a group's weights are decoded once into a scratch buffer laid out as
// matmul_q8.cc's transposition (32-bit lane r of vector j holds row r's levels 4j..4j+3) with
// the scales beside them, and every token tile multiplies it: vpmaddubsw on |q| and x with q's
// sign, vpmaddwd by ones, per 16-element half, then the halves' integer scales with vpmulld.
// Targets below AVX2 compute the same integers in scalar code.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matmul_quant.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/matmul_q8.h"
#include "kernels/quant_blocks.h"

#if HWY_ARCH_X86
#include <immintrin.h>
#endif

#ifndef SLUICE_KERNELS_MATMUL_QUANT_ONCE
#define SLUICE_KERNELS_MATMUL_QUANT_ONCE
namespace sluice::kernels {
constexpr int kQuantGroupRows = 8;
}  // namespace sluice::kernels
#endif

HWY_BEFORE_NAMESPACE();
namespace sluice::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int kRows = kQuantGroupRows;
constexpr int kChunk = 32;    // sub-blocks decoded at a time: 14 KiB of scratch, in L1
constexpr int kTokenTile = 4;  // tokens per tile: 4 accumulators, 4 integer sums, 4 partials

// One chunk of a row group, decoded: w[i][j][4r + c] = row r, sub-block b0 + i, level 4j + c.
struct QuantChunk {
  alignas(32) int8_t w[kChunk][8][4 * kRows];
  alignas(32) int32_t sc[kChunk][2][kRows];
  alignas(32) int32_t m[kChunk][2][kRows];
  alignas(32) float d[kChunk][kRows];
  alignas(32) float dmin[kChunk][kRows];
};

void decode_chunk(gguf::TensorType type, const uint8_t* const* rows, int64_t b0, int num_blocks, QuantChunk& c) {
  Decoded32 dec;
  for (int i = 0; i < num_blocks; ++i) {
    for (int r = 0; r < kRows; ++r) {
      decode_block32(type, rows[r], b0 + i, dec);
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

// Quantized rows, scales and 16-element sums of tokens [t0, t0 + kT).
template <int kT>
struct Tokens {
  const int8_t* x[kT];
  const float* dx[kT];
  const int16_t* sums[kT];
  Tokens(const QuantizedActivations& xq, int64_t cols, int64_t t0) {
    for (int t = 0; t < kT; ++t) {
      x[t] = xq.q.data() + (t0 + t) * cols;
      dx[t] = xq.d.data() + (t0 + t) * (cols / xq.block);
      sums[t] = xq.sums.data() + (t0 + t) * (cols / 16);
    }
  }
};

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
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
      // One scale for the sub-block: sc * (sum of both halves), the same integer.
      step_sums(0, 8, part);
      const __m256i sc = _mm256_load_si256(reinterpret_cast<const __m256i*>(c.sc[i][0]));
      for (int t = 0; t < kT; ++t) isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(part[t], sc));
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

template <bool kHalves, bool kMin, int kSub>
HWY_INLINE void token_tiles(const QuantChunk& c, int64_t b0, int num_blocks, const QuantizedActivations& xq,
                            int64_t cols, int64_t num_tokens, float* acc) {
  int64_t t0 = 0;
  for (; t0 + kTokenTile <= num_tokens; t0 += kTokenTile) {
    tile<kTokenTile, kHalves, kMin, kSub>(c, b0, num_blocks, Tokens<kTokenTile>(xq, cols, t0), acc + t0 * kRows);
  }
  switch (num_tokens - t0) {
    case 3: tile<3, kHalves, kMin, kSub>(c, b0, num_blocks, Tokens<3>(xq, cols, t0), acc + t0 * kRows); break;
    case 2: tile<2, kHalves, kMin, kSub>(c, b0, num_blocks, Tokens<2>(xq, cols, t0), acc + t0 * kRows); break;
    case 1: tile<1, kHalves, kMin, kSub>(c, b0, num_blocks, Tokens<1>(xq, cols, t0), acc + t0 * kRows); break;
    default: break;
  }
}

template <bool kHalves, bool kMin, int kSub>
void groups(const WeightView& w, const QuantizedActivations& xq, int64_t num_tokens, float* y, int64_t group_begin,
            int64_t group_end) {
  const int64_t num_blocks = w.cols / kSubBlock;
  std::vector<float> acc(num_tokens * kRows);
  QuantChunk chunk;
  for (int64_t g = group_begin; g < group_end; ++g) {
    const int64_t n0 = g * kRows;
    const int64_t num_rows = std::min<int64_t>(kRows, w.rows - n0);
    const uint8_t* rows[kRows];
    for (int r = 0; r < kRows; ++r) rows[r] = w.row(n0 + std::min<int64_t>(r, num_rows - 1));
    // The next group follows in memory: ask for its first lines while this one computes.
    if (g + 1 < group_end) {
      const uint8_t* next = w.row(n0 + kRows);
      for (size_t line = 0; line < std::min<size_t>(w.row_bytes() * kRows, 4096); line += 64) {
        hwy::Prefetch(next + line);
      }
    }
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t b0 = 0; b0 < num_blocks; b0 += kChunk) {
      const int nb = static_cast<int>(std::min<int64_t>(kChunk, num_blocks - b0));
      decode_chunk(w.type, rows, b0, nb, chunk);
      token_tiles<kHalves, kMin, kSub>(chunk, b0, nb, xq, w.cols, num_tokens, acc.data());
    }
    for (int64_t t = 0; t < num_tokens; ++t) {
      std::memcpy(y + t * w.rows + n0, acc.data() + t * kRows, num_rows * sizeof(float));
    }
  }
}

void MatmulQuantGroups(const WeightView& w, const QuantizedActivations& xq, int64_t num_tokens, float* y,
                       int64_t group_begin, int64_t group_end) {
  const bool halves = has_half_scales(w.type), min = has_min(w.type);
  auto run = [&](auto fn) { fn(w, xq, num_tokens, y, group_begin, group_end); };
  if (block_elements(w.type) == kSubBlock) {
    return min ? run(groups<false, true, 1>) : run(groups<false, false, 1>);
  }
  if (halves) return min ? run(groups<true, true, 8>) : run(groups<true, false, 8>);
  return min ? run(groups<false, true, 8>) : run(groups<false, false, 8>);
}

}  // namespace HWY_NAMESPACE
}  // namespace sluice::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace sluice::kernels {

HWY_EXPORT(MatmulQuantGroups);

void matmul_quant(ThreadPool& pool, std::span<const MatmulTarget> targets, const float* x, int64_t num_tokens) {
  if (targets.empty()) return;
  const int64_t cols = targets[0].w.cols;
  QuantizedActivations xq;
  const gguf::TensorType type = targets[0].w.type;
  quantize_activations(x, num_tokens, cols, xq, block_elements(type), /*with_sums=*/has_min(type));
  const size_t row_bytes = std::max<size_t>(1, targets[0].w.row_bytes());
  const int64_t grain =
      std::max<int64_t>(1, (int64_t{64} << 10) / (kQuantGroupRows * static_cast<int64_t>(row_bytes)));
  auto fn = HWY_DYNAMIC_DISPATCH(MatmulQuantGroups);
  parallel_over_targets(
      pool, targets, [](const WeightView& w) { return (w.rows + kQuantGroupRows - 1) / kQuantGroupRows; }, grain,
      [&](size_t i, int64_t begin, int64_t end) { fn(targets[i].w, xq, num_tokens, targets[i].y, begin, end); });
}

}  // namespace sluice::kernels
#endif  // HWY_ONCE
