#include "engine/kv_cache.h"

#include <numeric>

#include <gtest/gtest.h>

namespace sluice {
namespace {

// Block size 2 keeps the token lists short: a "prefix" of blocks is a list of token pairs.
struct Fixture {
  explicit Fixture(std::string eviction = "lru", int32_t num_blocks = 6,
                   std::vector<std::vector<int32_t>> pinned = {})
      : cache({.num_blocks = num_blocks, .block_size = 2, .eviction = std::move(eviction),
               .pinned_prefixes = std::move(pinned)},
              [this] { return now; }) {}

  // Allocates and commits blocks for `tokens` (full blocks only), as a sequence would; returns them.
  std::vector<int32_t> fill(const std::vector<int32_t>& tokens) {
    std::vector<int32_t> blocks = cache.match(tokens, static_cast<int32_t>(tokens.size()));
    cache.acquire(blocks);
    for (size_t start = blocks.size() * 2; start + 2 <= tokens.size(); start += 2) {
      const int32_t b = cache.allocate();
      const int32_t parent = blocks.empty() ? -1 : blocks.back();
      EXPECT_EQ(cache.commit(b, parent, std::span(tokens).subspan(start, 2)), b);
      blocks.push_back(b);
    }
    return blocks;
  }
  void release_all(const std::vector<int32_t>& blocks) {
    for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) cache.release(*it);
  }
  // Allocates until the cache has to evict `n` blocks; returns the evicted ids in order.
  std::vector<int32_t> evictions(int n) {
    std::vector<int32_t> order;
    while (cache.num_free() > 0) held.push_back(cache.allocate());
    for (int i = 0; i < n; ++i) {
      const int64_t before = cache.num_evictions();
      held.push_back(cache.allocate());
      EXPECT_EQ(cache.num_evictions(), before + 1);
      order.push_back(held.back());  // an evicted block is handed out again
    }
    return order;
  }

  double now = 0;
  KvCache cache;
  std::vector<int32_t> held;
};

TEST(KvCache, MatchesTheLongestCachedPrefixOfFullBlocks) {
  Fixture f;
  auto a = f.fill({1, 2, 3, 4, 5, 6});
  f.release_all(a);
  EXPECT_EQ(f.cache.num_cached(), 3);
  EXPECT_EQ(f.cache.num_held(), 0);
  EXPECT_EQ(f.cache.match(std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7}, 7), a);
  EXPECT_EQ(f.cache.match(std::vector<int32_t>{1, 2, 3, 4, 5, 6}, 5), (std::vector<int32_t>{a[0], a[1]}));
  EXPECT_EQ(f.cache.match(std::vector<int32_t>{1, 2, 3, 9, 5, 6}, 6), (std::vector<int32_t>{a[0]}));
  // The same tokens after a different parent are a different prefix.
  EXPECT_TRUE(f.cache.match(std::vector<int32_t>{3, 4}, 2).empty());
  EXPECT_TRUE(f.cache.match(std::vector<int32_t>{1}, 1).empty());
}

TEST(KvCache, CommittingAnIndexedPrefixReturnsTheExistingBlock) {
  Fixture f;
  auto a = f.fill({1, 2});
  const int32_t b = f.cache.allocate();
  EXPECT_EQ(f.cache.commit(b, -1, std::vector<int32_t>{1, 2}), a[0]);
  EXPECT_FALSE(f.cache.is_cached(b));
  f.cache.release(b);  // a private block goes straight back to the free list
  EXPECT_EQ(f.cache.num_free(), 5);
}

TEST(KvCache, HeldBlocksAreNeverEvictedAndSharingCountsReferences) {
  Fixture f("lru", 3);
  auto a = f.fill({1, 2, 3, 4});
  auto b = f.fill({1, 2, 3, 4});  // shares both blocks
  EXPECT_EQ(a, b);
  EXPECT_EQ(f.cache.ref_count(a[0]), 2);
  EXPECT_EQ(f.cache.num_allocatable(), 1);
  f.release_all(a);
  EXPECT_EQ(f.cache.num_allocatable(), 1);  // still held by b
  f.release_all(b);
  EXPECT_EQ(f.cache.num_allocatable(), 3);
}

// Three prefixes released at t = 1, 2, 3 (first blocks 1|2, 3|4, 5|6 with one child each):
//
//   root ─ [1 2] ─ [11 12]      released at t=1, then hit again at t=4
//        ─ [3 4] ─ [13 14]      released at t=2
//        ─ [5 6] ─ [15 16]      released at t=3
//
// LRU evicts leaves before parents, least recent first: after the hit at t=4 the order is
//   [13 14] [3 4] [15 16] [5 6] [11 12] [1 2].
TEST(KvCache, LruEvictsLeavesBeforeParentsLeastRecentFirst) {
  Fixture f("lru", 6);
  std::vector<std::vector<int32_t>> prefixes = {{1, 2, 11, 12}, {3, 4, 13, 14}, {5, 6, 15, 16}};
  std::vector<std::vector<int32_t>> blocks;
  for (const auto& p : prefixes) blocks.push_back(f.fill(p));
  for (int i = 0; i < 3; ++i) {
    f.now = i + 1;
    f.release_all(blocks[i]);
  }
  f.now = 4;
  auto again = f.fill(prefixes[0]);  // a hit on the whole first prefix
  EXPECT_EQ(again, blocks[0]);
  f.now = 5;
  f.release_all(again);
  EXPECT_EQ(f.evictions(6), (std::vector<int32_t>{blocks[1][1], blocks[1][0], blocks[2][1], blocks[2][0],
                                                  blocks[0][1], blocks[0][0]}));
}

// LFU: the prefix used three times outlives the ones used once, whatever their recency.
TEST(KvCache, LfuEvictsTheLeastUsedFirst) {
  Fixture f("lfu", 4);
  auto a = f.fill({1, 2, 3, 4});
  f.now = 1;
  f.release_all(a);
  for (int i = 0; i < 2; ++i) {
    f.now = 2 + i;
    f.release_all(f.fill({1, 2, 3, 4}));
  }
  f.now = 10;
  auto b = f.fill({5, 6, 7, 8});
  f.now = 11;
  f.release_all(b);
  // a's blocks: used at fill (1), released (2), twice more hit and released (6 uses); b: 2 uses.
  EXPECT_EQ(f.evictions(4), (std::vector<int32_t>{b[1], b[0], a[1], a[0]}));
}

TEST(KvCache, PinnedPrefixesSurvivePressure) {
  Fixture f("pinned", 4, {{1, 2, 3, 4}});
  auto sys = f.fill({1, 2, 3, 4, 9, 9});  // the pinned system prompt, then a private question
  f.release_all(sys);
  EXPECT_EQ(f.cache.num_cached(), 3);
  EXPECT_EQ(f.cache.num_pinned_cached(), 2);
  EXPECT_EQ(f.cache.num_allocatable(), 2);  // one free block and the question's block
  auto order = f.evictions(1);
  EXPECT_EQ(order, std::vector<int32_t>{sys[2]});
  EXPECT_EQ(f.cache.num_allocatable(), 0);
  EXPECT_EQ(f.cache.match(std::vector<int32_t>{1, 2, 3, 4, 7}, 5), (std::vector<int32_t>{sys[0], sys[1]}));
  // Under plain LRU the same blocks are evictable.
  Fixture g("lru", 4, {{1, 2, 3, 4}});
  g.release_all(g.fill({1, 2, 3, 4, 9, 9}));
  EXPECT_EQ(g.cache.num_allocatable(), 4);
}

TEST(KvCache, OffMeansNothingIsIndexed) {
  KvCache cache({.num_blocks = 2, .block_size = 2, .prefix_caching = false}, [] { return 0.0; });
  const int32_t b = cache.allocate();
  EXPECT_EQ(cache.commit(b, -1, std::vector<int32_t>{1, 2}), b);
  cache.release(b);
  EXPECT_EQ(cache.num_free(), 2);
  EXPECT_TRUE(cache.match(std::vector<int32_t>{1, 2, 3}, 3).empty());
}

TEST(EvictionPolicy, UnknownNameIsAClearError) {
  auto p = make_eviction_policy("fifo", 4);
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().message(), "unknown KV eviction policy 'fifo' (choices: lru, lfu, pinned)");
}

}  // namespace
}  // namespace sluice
