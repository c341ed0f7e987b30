#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/peak.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <vector>

#include "bench/peak.h"

#if HWY_ARCH_X86
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace sluice::bench {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Sums floats in [begin, end); returns the sum so the loads cannot be dropped.
float SumRange(const float* p, int64_t begin, int64_t end) {
  const hn::CappedTag<float, 8> d;
  const int64_t lanes = hn::Lanes(d);
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  int64_t i = begin;
  for (; i + 4 * lanes <= end; i += 4 * lanes) {
    a0 = hn::Add(a0, hn::LoadU(d, p + i));
    a1 = hn::Add(a1, hn::LoadU(d, p + i + lanes));
    a2 = hn::Add(a2, hn::LoadU(d, p + i + 2 * lanes));
    a3 = hn::Add(a3, hn::LoadU(d, p + i + 3 * lanes));
  }
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
}

// Runs `iters` rounds of 8 independent FMA chains; returns FLOPs done.
double FmaChains(int64_t iters, float seed) {
  const hn::CappedTag<float, 8> d;
  auto m = hn::Set(d, 0.999999f), c = hn::Set(d, 1e-7f);
  hn::Vec<decltype(d)> a[8];
  for (int j = 0; j < 8; ++j) a[j] = hn::Set(d, seed + j);
  for (int64_t i = 0; i < iters; ++i) {
    for (int j = 0; j < 8; ++j) a[j] = hn::MulAdd(a[j], m, c);
  }
  auto s = a[0];
  for (int j = 1; j < 8; ++j) s = hn::Add(s, a[j]);
  volatile float sink = hn::GetLane(s);
  (void)sink;
  return static_cast<double>(iters) * 8 * hn::Lanes(d) * 2;
}

// Runs `iters` rounds of the Q8_0 kernel's inner loop on data in L1: for each of 8 weight
// vectors (8 rows x 4 bytes), its absolute value, then for each of 8 tokens a broadcast of the
// token's 4 bytes, a sign, an unsigned-by-signed multiply-add to int16 pairs, a widening
// multiply-add to int32 and an add. Returns multiply-accumulates done (32 per token and weight
// vector). Below AVX2 (no such instructions) returns 0.
double Int8Chains(int64_t iters, int32_t seed) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  alignas(32) int8_t w[8][32];
  alignas(32) int8_t x[8][32];
  for (int j = 0; j < 8; ++j) {
    for (int k = 0; k < 32; ++k) {
      w[j][k] = static_cast<int8_t>((seed + 31 * j + 7 * k) % 255 - 127);
      x[j][k] = static_cast<int8_t>((seed + 17 * j + 5 * k) % 255 - 127);
    }
  }
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc[8];
  for (int t = 0; t < 8; ++t) acc[t] = _mm256_setzero_si256();
  for (int64_t i = 0; i < iters; ++i) {
    asm volatile("" ::: "memory");  // w and x "change": loads and products stay in the loop
    for (int j = 0; j < 8; ++j) {
      const __m256i wv = _mm256_load_si256(reinterpret_cast<const __m256i*>(w[j]));
      const __m256i wa = _mm256_abs_epi8(wv);
      for (int t = 0; t < 8; ++t) {
        int32_t x4;
        std::memcpy(&x4, &x[t][4 * j], 4);
        const __m256i xs = _mm256_sign_epi8(_mm256_set1_epi32(x4), wv);
        acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(_mm256_maddubs_epi16(wa, xs), ones));
      }
    }
  }
  __m256i s = acc[0];
  for (int t = 1; t < 8; ++t) s = _mm256_add_epi32(s, acc[t]);
  volatile int sink = _mm256_extract_epi32(s, 0);
  (void)sink;
  return static_cast<double>(iters) * 8 * 8 * 32;
#else
  (void)iters;
  (void)seed;
  return 0;
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace sluice::bench
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace sluice::bench {

HWY_EXPORT(SumRange);
HWY_EXPORT(FmaChains);
HWY_EXPORT(Int8Chains);

namespace {
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

void CacheEvictor::operator()() {
  uint8_t x = 0;
  for (size_t i = 0; i < buf_.size(); i += 64) x ^= buf_[i];
  // Kept, so the reads are not optimized away.
  sink_ = static_cast<uint8_t>(sink_ ^ x);
  asm volatile("" : : "r"(sink_) : "memory");
}

double measure_read_bandwidth(ThreadPool& pool) {
  const int64_t n = int64_t{256} << 20;  // 1 GiB of floats
  std::vector<float> buf(n, 1.0f);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::atomic<float> total{0};
    const double t0 = now();
    pool.parallel_for(pool.num_threads(), [&](int64_t b, int64_t e) {
      for (int64_t part = b; part < e; ++part) {
        const int64_t lo = n * part / pool.num_threads(), hi = n * (part + 1) / pool.num_threads();
        float s = HWY_DYNAMIC_DISPATCH(SumRange)(buf.data(), lo, hi);
        float cur = total.load();
        while (!total.compare_exchange_weak(cur, cur + s)) {
        }
      }
    });
    best = std::max(best, n * sizeof(float) / (now() - t0));
  }
  return best;
}

// Best of 3 of the operations per second of `ops(part)` run once per thread, all at once.
double best_parallel_rate(ThreadPool& pool, const std::function<double(int64_t)>& ops) {
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::atomic<int64_t> total{0};
    const double t0 = now();
    pool.parallel_for(pool.num_threads(), [&](int64_t b, int64_t e) {
      for (int64_t part = b; part < e; ++part) total += static_cast<int64_t>(ops(part));
    });
    best = std::max(best, total.load() / (now() - t0));
  }
  return best;
}

double measure_peak_flops(ThreadPool& pool) {
  return best_parallel_rate(pool, [](int64_t part) {
    return HWY_DYNAMIC_DISPATCH(FmaChains)(20'000'000, static_cast<float>(part));
  });
}

double measure_peak_int8_macs(ThreadPool& pool) {
  return best_parallel_rate(pool, [](int64_t part) {
    return HWY_DYNAMIC_DISPATCH(Int8Chains)(1'500'000, static_cast<int32_t>(part));
  });
}

}  // namespace sluice::bench
#endif  // HWY_ONCE
