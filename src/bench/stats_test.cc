#include "bench/stats.h"

#include <gtest/gtest.h>

namespace sluice::bench {
namespace {

TEST(Percentile, InterpolatesBetweenNearestRanks) {
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(percentile(v, 50), 50.5);
  EXPECT_DOUBLE_EQ(percentile(v, 90), 90.1);
  EXPECT_DOUBLE_EQ(percentile(v, 99), 99.01);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 100);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7);
}

TEST(Distribution, SortsAndSummarizes) {
  Distribution d = distribution({4, 1, 3, 2});
  EXPECT_EQ(d.count, 4);
  EXPECT_DOUBLE_EQ(d.mean, 2.5);
  EXPECT_DOUBLE_EQ(d.min, 1);
  EXPECT_DOUBLE_EQ(d.max, 4);
  EXPECT_DOUBLE_EQ(d.p50, 2.5);
  EXPECT_DOUBLE_EQ(d.p90, 3.7);
}

TEST(Distribution, EmptyHasNoSamples) {
  Distribution d = distribution({});
  EXPECT_EQ(d.count, 0);
  EXPECT_EQ(d.p99, 0);
}

}  // namespace
}  // namespace sluice::bench
