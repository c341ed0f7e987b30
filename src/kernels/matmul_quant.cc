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
#include "kernels/kernel_path.h"
#include "kernels/decoded_chunk.h"
#include "kernels/matmul_amx.h"
#include "kernels/matmul_lean.h"
#include "kernels/matmul_vnni.h"
#include "kernels/packed_weight.h"
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

using QuantChunk = DecodedChunk<kRows>;
static_assert(kChunk == kChunkSubBlocks);

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
      // No sums where the type does not use them: an offset from null is undefined (UBSan).
      sums[t] = xq.sums.empty() ? nullptr : xq.sums.data() + (t0 + t) * (cols / 16);
    }
  }
};

#include "kernels/matmul_quant_tiles-inl.h"  // decode_chunk, direct, tile: per target

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

template <gguf::TensorType kType>
void groups(const WeightView& w, const QuantizedActivations& xq, int64_t num_tokens, float* y, int64_t group_begin,
            int64_t group_end) {
  constexpr bool kHalves = has_half_scales(kType), kMin = has_min(kType);
  constexpr int kSub = block_elements(kType) / kSubBlock;
  const int64_t num_blocks = w.cols / kSubBlock;
  std::vector<float> acc(num_tokens * kRows);
  QuantChunk chunk;
  for (int64_t g = group_begin; g < group_end; ++g) {
    const int64_t n0 = g * kRows;
    const uint8_t* rows[kRows];
    const int64_t num_rows = group_rows(w, g, rows);
    const uint8_t* next = g + 1 < group_end ? w.row(n0 + kRows) : nullptr;
    if (kHasDirect && num_tokens == 1) {
      direct<kType, kHalves, kMin, kSub>(rows, num_blocks, xq.q.data(), xq.d.data(),
                                         kMin ? xq.sums.data() : nullptr, next, w.row_bytes() * kRows, acc.data());
      std::memcpy(y + n0, acc.data(), num_rows * sizeof(float));
      continue;
    }
    // The next group follows in memory: ask for its first lines while this one computes.
    if (next != nullptr) {
      for (size_t line = 0; line < std::min<size_t>(w.row_bytes() * kRows, 4096); line += 64) hwy::Prefetch(next + line);
    }
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t b0 = 0; b0 < num_blocks; b0 += kChunk) {
      const int nb = static_cast<int>(std::min<int64_t>(kChunk, num_blocks - b0));
      decode_chunk<kType, kRows>(rows, b0, nb, chunk);
      token_tiles<kHalves, kMin, kSub>(chunk, b0, nb, xq, w.cols, num_tokens, acc.data());
    }
    store_group<kRows>(acc.data(), num_tokens, num_rows, y, w.rows, n0);
  }
}

template <int kN>
void DecodeChunk(gguf::TensorType type, const uint8_t* const* rows, int64_t b0, int num_blocks, DecodedChunk<kN>& c) {
  using T = gguf::TensorType;
  switch (type) {
    case T::kQ4_0: return decode_chunk<T::kQ4_0, kN>(rows, b0, num_blocks, c);
    case T::kQ4_1: return decode_chunk<T::kQ4_1, kN>(rows, b0, num_blocks, c);
    case T::kQ5_0: return decode_chunk<T::kQ5_0, kN>(rows, b0, num_blocks, c);
    case T::kQ5_1: return decode_chunk<T::kQ5_1, kN>(rows, b0, num_blocks, c);
    case T::kQ8_0: return decode_chunk<T::kQ8_0, kN>(rows, b0, num_blocks, c);
    case T::kIQ4_NL: return decode_chunk<T::kIQ4_NL, kN>(rows, b0, num_blocks, c);
    case T::kQ2_K: return decode_chunk<T::kQ2_K, kN>(rows, b0, num_blocks, c);
    case T::kQ3_K: return decode_chunk<T::kQ3_K, kN>(rows, b0, num_blocks, c);
    case T::kQ4_K: return decode_chunk<T::kQ4_K, kN>(rows, b0, num_blocks, c);
    case T::kQ5_K: return decode_chunk<T::kQ5_K, kN>(rows, b0, num_blocks, c);
    case T::kQ6_K: return decode_chunk<T::kQ6_K, kN>(rows, b0, num_blocks, c);
    case T::kIQ4_XS: return decode_chunk<T::kIQ4_XS, kN>(rows, b0, num_blocks, c);
    default: return;
  }
}

void DecodeChunk16(gguf::TensorType type, const uint8_t* const* rows, int64_t b0, int num_blocks,
                   DecodedChunk<16>& c) {
  DecodeChunk<16>(type, rows, b0, num_blocks, c);
}

void DecodeChunk8(gguf::TensorType type, const uint8_t* const* rows, int64_t b0, int num_blocks,
                  DecodedChunk<8>& c) {
  DecodeChunk<8>(type, rows, b0, num_blocks, c);
}

void MatmulQuantGroups(const WeightView& w, const QuantizedActivations& xq, int64_t num_tokens, float* y,
                       int64_t group_begin, int64_t group_end) {
  using T = gguf::TensorType;
  auto run = [&](auto fn) { fn(w, xq, num_tokens, y, group_begin, group_end); };
  switch (w.type) {
    case T::kQ4_0: return run(groups<T::kQ4_0>);
    case T::kQ4_1: return run(groups<T::kQ4_1>);
    case T::kQ5_0: return run(groups<T::kQ5_0>);
    case T::kQ5_1: return run(groups<T::kQ5_1>);
    case T::kQ8_0: return run(groups<T::kQ8_0>);
    case T::kIQ4_NL: return run(groups<T::kIQ4_NL>);
    case T::kQ2_K: return run(groups<T::kQ2_K>);
    case T::kQ3_K: return run(groups<T::kQ3_K>);
    case T::kQ4_K: return run(groups<T::kQ4_K>);
    case T::kQ5_K: return run(groups<T::kQ5_K>);
    case T::kQ6_K: return run(groups<T::kQ6_K>);
    case T::kIQ4_XS: return run(groups<T::kIQ4_XS>);
    default: return;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace sluice::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace sluice::kernels {

// One parallel loop over the row groups of `group_rows` rows of every target, with chunks of
// about 64 KiB of weights per hand-out.
template <class Fn>
void over_groups(ThreadPool& pool, std::span<const MatmulTarget> targets, int64_t group_rows, Fn fn) {
  const size_t row_bytes = std::max<size_t>(1, targets[0].w.row_bytes());
  const int64_t grain = std::max<int64_t>(1, (int64_t{64} << 10) / (group_rows * static_cast<int64_t>(row_bytes)));
  parallel_over_targets(
      pool, targets, [&](const WeightView& w) { return (w.rows + group_rows - 1) / group_rows; }, grain,
      [&](size_t i, int64_t begin, int64_t end) { fn(targets[i].w, targets[i].y, begin, end); });
}

HWY_EXPORT(MatmulQuantGroups);
HWY_EXPORT(DecodeChunk16);
HWY_EXPORT(DecodeChunk8);

void decode_chunk16(gguf::TensorType type, const uint8_t* const* rows, int64_t b0, int num_blocks,
                    DecodedChunk<16>& c) {
  HWY_DYNAMIC_DISPATCH(DecodeChunk16)(type, rows, b0, num_blocks, c);
}

void decode_chunk8(gguf::TensorType type, const uint8_t* const* rows, int64_t b0, int num_blocks,
                   DecodedChunk<8>& c) {
  HWY_DYNAMIC_DISPATCH(DecodeChunk8)(type, rows, b0, num_blocks, c);
}

QuantRoute quant_route(std::span<const MatmulTarget> targets, int64_t num_tokens) {
  const KernelPath path = active_kernel_path();
  // The lean form where every weight has it: on the avx512 path for any number of tokens (about
  // the file's bytes, against 1.125 to 1.75 bytes a weight for the tile form; measured faster at
  // every count from 2 to 512), on the amx path for fewer tokens than its tiles want, on the
  // avxvnni path as below.
  const bool all_lean = std::all_of(targets.begin(), targets.end(), [](const MatmulTarget& t) {
    return t.w.packed != nullptr && t.w.packed->lean();
  });
  if (all_lean && kernel_path_runs(KernelPath::kAvx512) &&
      (path == KernelPath::kAvx512 || (path == KernelPath::kAmx && num_tokens < kAmxMinTokens))) {
    return QuantRoute::kLean512;
  }
  // On 256 bits too, for every count (README), with AVX-VNNI or with AVX2 alone (two vectors a
  // row group, tiles of 2 tokens; on avx2, batches of some types in 8-row parts: matmul_lean_avx2.cc).
  if (all_lean && path == KernelPath::kAvxVnni) return QuantRoute::kLean256;
  if (all_lean && path == KernelPath::kAvx2) return QuantRoute::kLeanAvx2;
  switch (path) {
    case KernelPath::kAmx:
      if (num_tokens >= kAmxMinTokens) return QuantRoute::kAmx;
      // Fewer tokens than an AMX tile wants: the best vector path (every AMX CPU so far has
      // AVX-512 VNNI; kernel_path.h says whether this one does).
      if (num_tokens >= kVnniMinTokens && kernel_path_runs(KernelPath::kAvx512)) return QuantRoute::kVnni512;
      return QuantRoute::kVector;
    case KernelPath::kAvx512: return num_tokens >= kVnniMinTokens ? QuantRoute::kVnni512 : QuantRoute::kVector;
    case KernelPath::kAvxVnni: return num_tokens >= kVnniMinTokens ? QuantRoute::kVnni256 : QuantRoute::kVector;
    default: return QuantRoute::kVector;
  }
}

void matmul_quant(ThreadPool& pool, std::span<const MatmulTarget> targets, const float* x, int64_t num_tokens) {
  if (targets.empty()) return;
  const int64_t cols = targets[0].w.cols;
  QuantizedActivations xq;
  const gguf::TensorType type = targets[0].w.type;
  const QuantRoute route = quant_route(targets, num_tokens);
  const bool lean = route == QuantRoute::kLean512 || route == QuantRoute::kLean256 || route == QuantRoute::kLeanAvx2;
  quantize_activations(x, num_tokens, cols, xq, block_elements(type), /*with_sums=*/has_min(type) || lean);
  if (lean) {
    const auto fn = route == QuantRoute::kLean512   ? lean512_matmul
                    : route == QuantRoute::kLean256 ? lean256_matmul
                                                    : lean_avx2_matmul;
    over_groups(pool, targets, PackedWeight::kRows, [&](const WeightView& w, float* y, int64_t begin, int64_t end) {
      fn(w, xq, num_tokens, y, begin, end);
    });
    return;
  }
  if (route == QuantRoute::kAmx) {
    const AmxActivations xa = pack_amx_activations(xq, num_tokens, cols);
    over_groups(pool, targets, kAmxGroupRows, [&](const WeightView& w, float* y, int64_t begin, int64_t end) {
      amx_matmul_groups(w, xa, num_tokens, y, begin, end);
    });
    return;
  }
  if (route == QuantRoute::kVnni512 || route == QuantRoute::kVnni256) {
    std::vector<uint8_t> xu(xq.q.size());  // vpdpbusd's unsigned operand: x + 128
    for (size_t i = 0; i < xu.size(); ++i) xu[i] = static_cast<uint8_t>(xq.q[i]) ^ 0x80;
    const bool wide = route == QuantRoute::kVnni512;
    over_groups(pool, targets, wide ? kVnni512GroupRows : kVnni256GroupRows,
                [&](const WeightView& w, float* y, int64_t begin, int64_t end) {
                  (wide ? vnni512_matmul_groups : vnni256_matmul_groups)(w, xq, xu.data(), num_tokens, y, begin, end);
                });
    return;
  }
  auto fn = HWY_DYNAMIC_DISPATCH(MatmulQuantGroups);
  over_groups(pool, targets, kQuantGroupRows, [&](const WeightView& w, float* y, int64_t begin, int64_t end) {
    fn(w, xq, num_tokens, y, begin, end);
  });
}

}  // namespace sluice::kernels
#endif  // HWY_ONCE
