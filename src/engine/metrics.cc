#include "engine/metrics.h"

#include <algorithm>

namespace sluice {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  const auto i = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  ++counts_[i];
  ++count_;
  sum_ += value;
}

std::vector<double> latency_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75,
          1.0,   1.5,    2.0,   3.0,  5.0,   7.5,  10.0,  15.0, 20.0, 30.0, 60.0, 120.0};
}

std::vector<double> count_buckets(int64_t max) {
  std::vector<double> b;
  for (int64_t v = 1; v <= max; v *= 2) b.push_back(static_cast<double>(v));
  return b;
}

}  // namespace sluice
