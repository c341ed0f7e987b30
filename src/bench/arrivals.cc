#include "bench/arrivals.h"

#include <cmath>

#include "common/check.h"

namespace sluice::bench {

double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

int64_t uniform_int(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  SLUICE_CHECK(lo <= hi) << lo << " > " << hi;
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  // NOTE: the modulo bias is below 2^-40 for the spans used here (lengths, token ids).
  return lo + static_cast<int64_t>(span == 0 ? rng() : rng() % span);
}

PoissonArrivals::PoissonArrivals(double rate_per_s, uint64_t seed) : rate_per_s_(rate_per_s), rng_(seed) {
  SLUICE_CHECK(rate_per_s > 0) << rate_per_s;
}

double PoissonArrivals::next_gap_s() { return -std::log1p(-uniform01(rng_)) / rate_per_s_; }

}  // namespace sluice::bench
