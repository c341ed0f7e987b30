// Percentiles and summaries of latency samples.
#pragma once

#include <cstdint>
#include <vector>

namespace sluice::bench {

// The p-th percentile (p in [0, 100]) of sorted values, interpolating linearly between the two
// nearest ranks (numpy's default): p50 of {1, 2, 3, 4} is 2.5. REQUIRES: sorted, not empty.
double percentile(const std::vector<double>& sorted, double p);

struct Distribution {
  int64_t count = 0;  // 0: no samples, every other field is 0
  double mean = 0;
  double min = 0;
  double p50 = 0;
  double p90 = 0;
  double p99 = 0;
  double max = 0;
};

Distribution distribution(std::vector<double> values);

}  // namespace sluice::bench
