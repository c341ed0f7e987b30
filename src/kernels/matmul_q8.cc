// Q8_0 matmul with integer dot products, compiled per SIMD target like matmul.cc.
//
// Activations are quantized per token and per block of 32 to int8 with one float scale:
// dx = max|x| / 127, qx = round(x / dx). A block's dot product sum_k qw[k] * qx[k] is then an
// exact int32 (at most 32 * 128 * 127 in magnitude, so exact in float too), and the output is
//
//   acc = 0;  for each block b, ascending:  acc = fma(dw[b] * dx[b], float(isum[b]), acc)
//
// for every (row, token): one fixed sequence of float operations. Integer sums do not depend
// on the order of their terms, so how a tile computes them is free; everything else is per
// (row, token), so results stay bit-identical whatever the batch, the tile a token lands in,
// or the thread split.
//
// Kernel shape: rows go in groups of 8 and one float vector holds a token's 8 rows, so the
// float work above is one convert, multiply and FMA per (8 rows, token, block), and no lane sum
// is needed at the end. Each row group is read from memory once for all tokens:
//
// - Several tokens: for each chunk of up to 32 blocks, the group's weights are transposed into
//   a scratch buffer where 32-bit lane r of vector j holds row r's bytes 4j..4j+3. A token's
//   bytes 4j..4j+3 are broadcast to all lanes; vpmaddubsw (|w| as u8 times x with w's sign, at
//   most 2 * 128 * 127 per pair: no saturation, even for w = -128) and vpmaddwd by ones give
//   each lane its row's 4-product sum, and 8 such steps the block's sums for the 8 rows.
//   Tokens go in tiles of 8 that share each weight vector loaded. The first tile of a chunk
//   prefetches the next chunk.
// - One token: the transposition would cost more than it saves. Each row's block times the
//   token's block gives 8 lanes of 4-product sums, and an add tree across the 8 rows folds them
//   into lane r = row r: the same integers.
//
// Rows past the end of the matrix repeat the last row and are not stored. Targets below AVX2
// compute the same integer sums with scalar code and use their own MulAdd: each target is
// consistent with itself.
//
// Error against the dequantized weights times the unquantized activations is bounded by
// sum_k |w_k| * dx_k / 2, the activation rounding (the kernel test checks that bound).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matmul_q8.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/matmul_q8.h"

#if HWY_ARCH_X86
#include <immintrin.h>
#endif

#ifndef SLUICE_KERNELS_MATMUL_Q8_ONCE
#define SLUICE_KERNELS_MATMUL_Q8_ONCE
namespace sluice::kernels {
// Rows per group: one float vector of 8 lanes holds a token's results for 8 rows.
constexpr int kQ8GroupRows = 8;
}  // namespace sluice::kernels
#endif

HWY_BEFORE_NAMESPACE();
namespace sluice::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int kBlock = gguf::kQ8_0BlockSize;
constexpr int kGroupRows = kQ8GroupRows;
constexpr int kGroupSteps = kBlock / 4;  // 4-byte steps per block
// Blocks transposed at a time: 32 blocks of 8 rows are 9 KiB of scratch, which stays in L1.
constexpr int kChunkBlocks = 32;
// Tokens per tile: each weight vector loaded serves 8 tokens, whose int32 sums stay in registers.
constexpr int kTokenTile = 8;

// One chunk of a row group, transposed: w[i][j][4 * r + c] = row r, block b0 + i, byte 4j + c.
struct GroupChunk {
  alignas(32) int8_t w[kChunkBlocks][kGroupSteps][4 * kGroupRows];
  alignas(32) float scale[kChunkBlocks][kGroupRows];  // dw of each row
};

// The 8 row pointers of a group and a chunk of its blocks.
struct ChunkRef {
  const uint8_t* rows[kGroupRows] = {};
  int64_t b0 = 0;
  int num_blocks = 0;  // 0: none
  bool linear = false;  // the chunk is a whole group of 8 consecutive rows: one run of memory
};

// Prefetches block i of chunk `next` (the one after the chunk being multiplied), so that its
// weights arrive while the current chunk is multiplied. A chunk that is a whole group of short
// rows is one run of memory, prefetched as such (a line at a time, the i-th num_blocks-th part
// at block i); prefetching each row's block (8 of them, most in lines already asked for) kept
// the memory system from streaming: measured with matmul_bench on the 151936 x 896 output
// matrix, 2 tokens ran at 14 GMAC/s that way and 24 GMAC/s this way, 4 tokens at 28 and 37.
// Bytes of a group of rows per block: 8 blocks.
constexpr size_t kGroupBlockBytes = kGroupRows * sizeof(gguf::BlockQ8_0);

// Prefetches the group-block-sized run of memory at p, a cache line at a time.
HWY_INLINE void prefetch_run(const uint8_t* p) {
  for (size_t line = 0; line < kGroupBlockBytes; line += 64) hwy::Prefetch(p + line);
  hwy::Prefetch(p + kGroupBlockBytes - 1);
}

HWY_INLINE void prefetch_block(const ChunkRef& next, int i) {
  if (i >= next.num_blocks) return;
  if (next.linear) {
    prefetch_run(next.rows[0] + i * kGroupBlockBytes);
    return;
  }
  const size_t off = static_cast<size_t>(next.b0 + i) * sizeof(gguf::BlockQ8_0);
  for (int r = 0; r < kGroupRows; ++r) hwy::Prefetch(next.rows[r] + off);
}

HWY_INLINE uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
// NOTE: Highway 1.0 has no op for vpmaddubsw or vpsignb, so this path uses intrinsics; every
// target at or above AVX2 (including the AVX-512 ones) runs it.

// dw of the block at byte offset off of the 8 rows.
HWY_INLINE __m256 load_scales(const uint8_t* const* rows, size_t off) {
  auto h = [&](int r) { return static_cast<int16_t>(load_u16(rows[r] + off)); };
  return _mm256_cvtph_ps(_mm_setr_epi16(h(0), h(1), h(2), h(3), h(4), h(5), h(6), h(7)));
}

// Chunk `cur` into c.
HWY_INLINE void transpose_chunk(const ChunkRef& cur, GroupChunk& c) {
  const uint8_t* const* rows = cur.rows;
  const int64_t b0 = cur.b0;
  for (int i = 0; i < cur.num_blocks; ++i) {
    const size_t off = static_cast<size_t>(b0 + i) * sizeof(gguf::BlockQ8_0);
    for (int h = 0; h < 2; ++h) {  // bytes 16h..16h+15: steps 4h..4h+3
      __m256i v[4];  // [row k, 4 steps | row k + 4, 4 steps]
      for (int k = 0; k < 4; ++k) {
        const auto* lo = reinterpret_cast<const __m128i*>(rows[k] + off + 2 + 16 * h);
        const auto* hi = reinterpret_cast<const __m128i*>(rows[k + 4] + off + 2 + 16 * h);
        v[k] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(lo)), _mm_loadu_si128(hi), 1);
      }
      const __m256i t0 = _mm256_unpacklo_epi32(v[0], v[1]);  // r0s0 r1s0 r0s1 r1s1 | r4s0 ...
      const __m256i t1 = _mm256_unpackhi_epi32(v[0], v[1]);  // r0s2 r1s2 r0s3 r1s3 | r4s2 ...
      const __m256i t2 = _mm256_unpacklo_epi32(v[2], v[3]);
      const __m256i t3 = _mm256_unpackhi_epi32(v[2], v[3]);
      auto* out = reinterpret_cast<__m256i*>(c.w[i][4 * h]);
      _mm256_store_si256(out + 0, _mm256_unpacklo_epi64(t0, t2));  // r0s0 r1s0 r2s0 r3s0 | r4s0 ...
      _mm256_store_si256(out + 1, _mm256_unpackhi_epi64(t0, t2));
      _mm256_store_si256(out + 2, _mm256_unpacklo_epi64(t1, t3));
      _mm256_store_si256(out + 3, _mm256_unpackhi_epi64(t1, t3));
    }
    _mm256_store_ps(c.scale[i], load_scales(rows, off));
  }
}

// acc[t][r] over blocks [b0, b0 + num_blocks) for kT tokens whose quantized rows are x[t].
template <int kT>
HWY_INLINE void tile(const GroupChunk& c, int64_t b0, int num_blocks, const int8_t* const* x,
                     const float* const* dx, const ChunkRef& prefetch, float* acc) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 a[kT];
  for (int t = 0; t < kT; ++t) a[t] = _mm256_loadu_ps(acc + t * kGroupRows);
  for (int i = 0; i < num_blocks; ++i) {
    prefetch_block(prefetch, i);
    const int64_t k0 = (b0 + i) * kBlock;
    __m256i sum[kT];
    for (int t = 0; t < kT; ++t) sum[t] = _mm256_setzero_si256();
    for (int j = 0; j < kGroupSteps; ++j) {
      const __m256i w = _mm256_load_si256(reinterpret_cast<const __m256i*>(c.w[i][j]));
      const __m256i w_abs = _mm256_abs_epi8(w);
      for (int t = 0; t < kT; ++t) {
        int32_t x4;
        std::memcpy(&x4, x[t] + k0 + 4 * j, 4);
        const __m256i xs = _mm256_sign_epi8(_mm256_set1_epi32(x4), w);
        sum[t] = _mm256_add_epi32(sum[t], _mm256_madd_epi16(_mm256_maddubs_epi16(w_abs, xs), ones));
      }
    }
    const __m256 dw = _mm256_load_ps(c.scale[i]);
    for (int t = 0; t < kT; ++t) {
      const __m256 s = _mm256_mul_ps(dw, _mm256_set1_ps(dx[t][b0 + i]));
      a[t] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(sum[t]), a[t]);
    }
  }
  for (int t = 0; t < kT; ++t) _mm256_storeu_ps(acc + t * kGroupRows, a[t]);
}

// For a single token the transposition costs more than it saves: this path multiplies each
// row's block by the token's block as they are (lane i of row r then holds a sum of 4 products)
// and folds the 8 rows' vectors together so that lane r holds row r's block sum, the same
// integer as the tile above. Reads whole rows: acc[r] over all blocks.
//
// Prefetching: rows longer than kShortRowBytes are read far enough in a stream each for the
// hardware prefetcher, helped by a prefetch kPrefetchBytes ahead in each row. Shorter rows (896
// columns: most matrices of a small model) end before a stream is picked up, so the group's
// loop prefetches the next group instead, which follows in memory: at block b, the b-th
// num_blocks-th part of it.
constexpr bool kHasDirect = true;
constexpr size_t kPrefetchBytes = 1024;
constexpr size_t kShortRowBytes = 2048;

HWY_INLINE void direct(const uint8_t* const* rows, int64_t num_blocks, const int8_t* x, const float* dx,
                       const uint8_t* next_group, float* acc) {
  const bool short_rows = static_cast<size_t>(num_blocks) * sizeof(gguf::BlockQ8_0) <= kShortRowBytes;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 a = _mm256_setzero_ps();
  for (int64_t b = 0; b < num_blocks; ++b) {
    const size_t off = static_cast<size_t>(b) * sizeof(gguf::BlockQ8_0);
    const __m256i xb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + b * kBlock));
    if (short_rows && next_group != nullptr) prefetch_run(next_group + b * kGroupBlockBytes);
    auto row_sums = [&](int r) {  // 8 lanes of 4-product sums
      if (!short_rows) hwy::Prefetch(rows[r] + off + kPrefetchBytes);
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[r] + off + 2));
      return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(xb, w)), ones);
    };
    // Rows (r, r + 1) interleaved: [r r+1 r r+1 | r r+1 r r+1].
    auto pair = [&](int r) {
      const __m256i q0 = row_sums(r), q1 = row_sums(r + 1);
      return _mm256_add_epi32(_mm256_unpacklo_epi32(q0, q1), _mm256_unpackhi_epi32(q0, q1));
    };
    // Rows r..r+3: [r..r+3 | r..r+3], each half a partial sum.
    auto quad = [&](int r) {
      const __m256i p0 = pair(r), p1 = pair(r + 2);
      return _mm256_add_epi32(_mm256_unpacklo_epi64(p0, p1), _mm256_unpackhi_epi64(p0, p1));
    };
    const __m256i lo = quad(0), hi = quad(4);
    // [rows 0-3 first halves | rows 4-7 second halves] + [rows 0-3 second | rows 4-7 first]
    const __m256i sum =
        _mm256_add_epi32(_mm256_blend_epi32(lo, hi, 0xF0), _mm256_permute2x128_si256(lo, hi, 0x21));
    const __m256 s = _mm256_mul_ps(load_scales(rows, off), _mm256_set1_ps(dx[b]));
    a = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(sum), a);
  }
  _mm256_storeu_ps(acc, a);
}
#else
// Same chunk layout and integer sums in scalar code; the float step is one MulAdd per
// (row, token, block), as in the vector path.
HWY_INLINE void transpose_chunk(const ChunkRef& cur, GroupChunk& c) {
  const hn::CappedTag<float, 1> d1;
  const hn::Rebind<hwy::float16_t, decltype(d1)> dh1;
  const uint8_t* const* rows = cur.rows;
  const int64_t b0 = cur.b0;
  for (int i = 0; i < cur.num_blocks; ++i) {
    const size_t off = static_cast<size_t>(b0 + i) * sizeof(gguf::BlockQ8_0);
    for (int r = 0; r < kGroupRows; ++r) {
      for (int j = 0; j < kGroupSteps; ++j) std::memcpy(&c.w[i][j][4 * r], rows[r] + off + 2 + 4 * j, 4);
      c.scale[i][r] =
          hn::GetLane(hn::PromoteTo(d1, hn::LoadU(dh1, reinterpret_cast<const hwy::float16_t*>(rows[r] + off))));
    }
  }
}

template <int kT>
HWY_INLINE void tile(const GroupChunk& c, int64_t b0, int num_blocks, const int8_t* const* x,
                     const float* const* dx, const ChunkRef& prefetch, float* acc) {
  const hn::CappedTag<float, 1> d1;
  for (int i = 0; i < num_blocks; ++i) {
    prefetch_block(prefetch, i);
    const int64_t k0 = (b0 + i) * kBlock;
    for (int t = 0; t < kT; ++t) {
      for (int r = 0; r < kGroupRows; ++r) {
        int32_t sum = 0;
        for (int j = 0; j < kGroupSteps; ++j)
          for (int e = 0; e < 4; ++e) sum += int32_t{c.w[i][j][4 * r + e]} * x[t][k0 + 4 * j + e];
        const float s = c.scale[i][r] * dx[t][b0 + i];
        float& a = acc[t * kGroupRows + r];
        a = hn::GetLane(hn::MulAdd(hn::Set(d1, s), hn::Set(d1, static_cast<float>(sum)), hn::Set(d1, a)));
      }
    }
  }
}
constexpr bool kHasDirect = false;

HWY_INLINE void direct(const uint8_t* const*, int64_t, const int8_t*, const float*, const uint8_t*, float*) {}
#endif  // HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2

// Quantized rows and scales of tokens [t0, t0 + kT).
template <int kT>
struct TokenRefs {
  const int8_t* x[kT];
  const float* dx[kT];
  TokenRefs(const QuantizedActivations& xq, int64_t cols, int64_t t0) {
    for (int t = 0; t < kT; ++t) {
      x[t] = xq.q.data() + (t0 + t) * cols;
      dx[t] = xq.d.data() + (t0 + t) * (cols / kBlock);
    }
  }
};

// Tokens [t0, t0 + kT) over one transposed chunk; acc is [num_tokens, 8].
template <int kT>
HWY_INLINE void token_tile(const GroupChunk& c, int64_t b0, int num_blocks, const QuantizedActivations& xq,
                           int64_t cols, int64_t t0, const ChunkRef& prefetch, float* acc) {
  const TokenRefs<kT> refs(xq, cols, t0);
  tile<kT>(c, b0, num_blocks, refs.x, refs.dx, prefetch, acc + t0 * kGroupRows);
}

// All tokens over one transposed chunk, in tiles of kTokenTile and one smaller tile; the first
// tile prefetches chunk `next`.
HWY_INLINE void token_tiles(const GroupChunk& c, int64_t b0, int num_blocks, const QuantizedActivations& xq,
                            int64_t cols, int64_t num_tokens, const ChunkRef& next, float* acc) {
  const ChunkRef none;
  int64_t t0 = 0;
  for (; t0 + kTokenTile <= num_tokens; t0 += kTokenTile) {
    token_tile<kTokenTile>(c, b0, num_blocks, xq, cols, t0, t0 == 0 ? next : none, acc);
  }
  const ChunkRef& prefetch = t0 == 0 ? next : none;
  switch (num_tokens - t0) {
    case 7: token_tile<7>(c, b0, num_blocks, xq, cols, t0, prefetch, acc); break;
    case 6: token_tile<6>(c, b0, num_blocks, xq, cols, t0, prefetch, acc); break;
    case 5: token_tile<5>(c, b0, num_blocks, xq, cols, t0, prefetch, acc); break;
    case 4: token_tile<4>(c, b0, num_blocks, xq, cols, t0, prefetch, acc); break;
    case 3: token_tile<3>(c, b0, num_blocks, xq, cols, t0, prefetch, acc); break;
    case 2: token_tile<2>(c, b0, num_blocks, xq, cols, t0, prefetch, acc); break;
    case 1: token_tile<1>(c, b0, num_blocks, xq, cols, t0, prefetch, acc); break;
    default: break;
  }
}

// Row groups [group_begin, group_end): rows 8 * group_begin up to 8 * group_end or w.rows.
void MatmulQ8Groups(const WeightView& w, const QuantizedActivations& xq, int64_t num_tokens, float* y,
                    int64_t group_begin, int64_t group_end) {
  const int64_t num_blocks = w.cols / kBlock;
  auto chunk_ref = [&](int64_t g, int64_t b0) {
    ChunkRef ref;
    if (g >= group_end) return ref;
    const int64_t n0 = g * kGroupRows;
    const int64_t last = std::min<int64_t>(kGroupRows, w.rows - n0) - 1;
    for (int r = 0; r < kGroupRows; ++r) ref.rows[r] = w.row(n0 + std::min<int64_t>(r, last));
    ref.b0 = b0;
    ref.num_blocks = static_cast<int>(std::min<int64_t>(kChunkBlocks, num_blocks - b0));
    ref.linear = num_blocks <= kChunkBlocks;
    return ref;
  };
  std::vector<float> acc(num_tokens * kGroupRows);
  auto store = [&](int64_t g) {
    const int64_t n0 = g * kGroupRows;
    const int64_t num_rows = std::min<int64_t>(kGroupRows, w.rows - n0);
    for (int64_t t = 0; t < num_tokens; ++t) {
      float* dst = y + t * w.rows + n0;
      const float* src = acc.data() + t * kGroupRows;
      if (num_rows == kGroupRows) {  // a fixed size: no call to memcpy
        std::memcpy(dst, src, kGroupRows * sizeof(float));
      } else {
        std::memcpy(dst, src, num_rows * sizeof(float));
      }
    }
  };
  if (kHasDirect && num_tokens == 1) {
    for (int64_t g = group_begin; g < group_end; ++g) {
      // The next group's rows follow this group's in memory; null past the range (another
      // thread's, or the end of the matrix).
      const uint8_t* next_group = g + 1 < group_end ? w.row((g + 1) * kGroupRows) : nullptr;
      direct(chunk_ref(g, 0).rows, num_blocks, xq.q.data(), xq.d.data(), next_group, acc.data());
      store(g);
    }
    return;
  }
  GroupChunk chunk;  // 9 KiB on the stack
  ChunkRef next = chunk_ref(group_begin, 0);
  for (int64_t g = group_begin; g < group_end; ++g) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t b0 = 0; b0 < num_blocks; b0 += kChunkBlocks) {
      const ChunkRef cur = next;
      next = b0 + kChunkBlocks < num_blocks ? chunk_ref(g, b0 + kChunkBlocks) : chunk_ref(g + 1, 0);
      transpose_chunk(cur, chunk);
      token_tiles(chunk, b0, cur.num_blocks, xq, w.cols, num_tokens, next, acc.data());
    }
    store(g);
  }
}

// Quantizes blocks [0, num_blocks) of x (`block` floats each, a multiple of 8) into q and d.
void QuantizeBlocks(const float* x, int64_t num_blocks, int64_t block, int8_t* q, float* d) {
  const hn::CappedTag<float, 8> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<int8_t, decltype(di)> d8;
  const int64_t lanes = hn::Lanes(df);
  for (int64_t i = 0; i < num_blocks; ++i) {
    const float* xb = x + i * block;
    auto vmax = hn::Zero(df);
    for (int64_t j = 0; j < block; j += lanes) vmax = hn::Max(vmax, hn::Abs(hn::LoadU(df, xb + j)));
    const float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
    const float scale = amax / 127.0f;
    const auto inv = hn::Set(df, scale > 0 ? 1.0f / scale : 0.0f);
    d[i] = scale;
    for (int64_t j = 0; j < block; j += lanes) {
      // |x| * inv <= 127 (up to rounding, and NearestInt rounds half to even), so the
      // saturating demotion does not clamp.
      hn::StoreU(hn::DemoteTo(d8, hn::NearestInt(hn::Mul(hn::LoadU(df, xb + j), inv))), d8, q + i * block + j);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace sluice::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace sluice::kernels {

HWY_EXPORT(MatmulQ8Groups);
HWY_EXPORT(QuantizeBlocks);

void quantize_activations(const float* x, int64_t num_tokens, int64_t cols, QuantizedActivations& out, int block,
                          bool with_sums) {
  const int64_t num_blocks = num_tokens * (cols / block);
  out.q.resize(num_tokens * cols);
  out.d.resize(num_blocks);
  out.block = block;
  HWY_DYNAMIC_DISPATCH(QuantizeBlocks)(x, num_blocks, block, out.q.data(), out.d.data());
  if (!with_sums) return;
  out.sums.resize(num_tokens * cols / 16);
  for (size_t i = 0; i < out.sums.size(); ++i) {
    int sum = 0;  // at most 16 * 127 in magnitude
    for (int k = 0; k < 16; ++k) sum += out.q[16 * i + k];
    out.sums[i] = static_cast<int16_t>(sum);
  }
}

void matmul_q8_0(ThreadPool& pool, std::span<const MatmulTarget> targets, const float* x, int64_t num_tokens) {
  if (targets.empty()) return;
  const int64_t cols = targets[0].w.cols;
  QuantizedActivations xq;
  quantize_activations(x, num_tokens, cols, xq);
  // Ranges of at least ~64 KiB of weights, so that claiming a range costs little next to it.
  const size_t row_bytes = std::max<size_t>(1, targets[0].w.row_bytes());
  const int64_t grain = std::max<int64_t>(1, (int64_t{64} << 10) / (kQ8GroupRows * static_cast<int64_t>(row_bytes)));
  auto fn = HWY_DYNAMIC_DISPATCH(MatmulQ8Groups);
  parallel_over_targets(
      pool, targets, [](const WeightView& w) { return (w.rows + kQ8GroupRows - 1) / kQ8GroupRows; }, grain,
      [&](size_t i, int64_t begin, int64_t end) { fn(targets[i].w, xq, num_tokens, targets[i].y, begin, end); });
}

}  // namespace sluice::kernels
#endif  // HWY_ONCE
