#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/peak.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <vector>

#include "bench/peak.h"

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

}  // namespace HWY_NAMESPACE
}  // namespace sluice::bench
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace sluice::bench {

HWY_EXPORT(SumRange);
HWY_EXPORT(FmaChains);

namespace {
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

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

double measure_peak_flops(ThreadPool& pool) {
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::atomic<int64_t> flops{0};
    const double t0 = now();
    pool.parallel_for(pool.num_threads(), [&](int64_t b, int64_t e) {
      for (int64_t part = b; part < e; ++part) {
        flops += static_cast<int64_t>(HWY_DYNAMIC_DISPATCH(FmaChains)(20'000'000, static_cast<float>(part)));
      }
    });
    best = std::max(best, flops.load() / (now() - t0));
  }
  return best;
}

}  // namespace sluice::bench
#endif  // HWY_ONCE
