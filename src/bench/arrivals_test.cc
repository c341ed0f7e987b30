#include "bench/arrivals.h"

#include <cmath>

#include <gtest/gtest.h>

namespace sluice::bench {
namespace {

TEST(PoissonArrivals, GapsHaveTheMeanAndSpreadOfAnExponential) {
  // 20000 gaps at 50/s: the sample mean is 1/50 s within 2%, and the coefficient of variation of
  // an exponential is 1 (a fixed-gap or uniform schedule would give 0 or 0.58).
  PoissonArrivals arrivals(50, 7);
  const int n = 20000;
  double sum = 0, sum_sq = 0;
  for (int i = 0; i < n; ++i) {
    const double gap = arrivals.next_gap_s();
    ASSERT_GE(gap, 0);
    sum += gap;
    sum_sq += gap * gap;
  }
  const double mean = sum / n;
  const double stddev = std::sqrt(sum_sq / n - mean * mean);
  EXPECT_NEAR(mean, 1.0 / 50, 0.02 / 50);
  EXPECT_NEAR(stddev / mean, 1.0, 0.03);
}

TEST(PoissonArrivals, SameSeedSameSchedule) {
  PoissonArrivals a(10, 42), b(10, 42), c(10, 43);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const double x = a.next_gap_s();
    EXPECT_EQ(x, b.next_gap_s());
    differs = differs || x != c.next_gap_s();
  }
  EXPECT_TRUE(differs);
}

TEST(UniformInt, StaysInItsClosedRangeAndReachesBothEnds) {
  std::mt19937_64 rng(1);
  bool saw_lo = false, saw_hi = false;
  for (int i = 0; i < 1000; ++i) {
    const int64_t v = uniform_int(rng, 3, 7);
    ASSERT_GE(v, 3);
    ASSERT_LE(v, 7);
    saw_lo = saw_lo || v == 3;
    saw_hi = saw_hi || v == 7;
  }
  EXPECT_TRUE(saw_lo && saw_hi);
  EXPECT_EQ(uniform_int(rng, 5, 5), 5);
}

}  // namespace
}  // namespace sluice::bench
