#include "common/thread_pool.h"

#include <atomic>
#include <vector>

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 7, 64, 1000}) {
      std::vector<std::atomic<int>> hits(n);
      pool.parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "threads=" << threads << " n=" << n;
    }
  }
}

TEST(ThreadPool, RespectsGrain) {
  ThreadPool pool(4);
  std::atomic<int> short_ranges{0};
  pool.parallel_for(100, [&](int64_t b, int64_t e) {
    if (e - b < 10 && e != 100) short_ranges.fetch_add(1);
  }, 10);
  EXPECT_EQ(short_ranges.load(), 0);
}

TEST(ThreadPool, ManyJobsInARow) {
  ThreadPool pool(3);
  int64_t total = 0;
  for (int job = 0; job < 2000; ++job) {
    std::atomic<int64_t> sum{0};
    pool.parallel_for(17, [&](int64_t b, int64_t e) { sum.fetch_add(e - b); });
    total += sum.load();
  }
  EXPECT_EQ(total, 2000 * 17);
}

}  // namespace
}  // namespace sluice
