// Random draws for the load generator, made here rather than with <random>'s distributions:
// their algorithms differ between standard libraries, and a --seed must give the same workload
// and the same arrival times wherever sluice was built. The engine is std::mt19937_64, whose
// output the standard fixes.
#pragma once

#include <cstdint>
#include <random>

namespace sluice::bench {

// A uniform double in [0, 1) from the top 53 bits of one draw.
double uniform01(std::mt19937_64& rng);

// A uniform integer in [lo, hi]. REQUIRES: lo <= hi.
int64_t uniform_int(std::mt19937_64& rng, int64_t lo, int64_t hi);

// The gaps between arrivals of a Poisson process of `rate_per_s`: independent exponential
// draws with mean 1 / rate_per_s, by inversion (-ln(1 - u) / rate).
class PoissonArrivals {
 public:
  // REQUIRES: rate_per_s > 0.
  PoissonArrivals(double rate_per_s, uint64_t seed);
  double next_gap_s();

 private:
  double rate_per_s_;
  std::mt19937_64 rng_;
};

}  // namespace sluice::bench
