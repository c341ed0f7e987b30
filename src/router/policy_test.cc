// The routing policies, the prefix index and the replica pool, without a network.
#include <map>
#include <set>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "router/backend.h"
#include "router/policy.h"
#include "router/prefix_index.h"

namespace sluice::router {
namespace {

std::vector<BackendConfig> backends(int n) {
  std::vector<BackendConfig> out;
  for (int i = 0; i < n; ++i) out.push_back(*parse_backend(fmt::format("http://10.0.0.{}:8000", i + 1)));
  return out;
}

std::vector<BackendView> views(int n) {
  std::vector<BackendView> v;
  for (int i = 0; i < n; ++i) v.push_back({i, true, 0, 0, 0});
  return v;
}

std::unique_ptr<Policy> policy(std::string_view name, int n, PolicyOptions o = {}) {
  o.seed = 7;
  auto p = make_policy(name, backends(n), o);
  EXPECT_TRUE(p) << name;
  return std::move(*p);
}

TEST(Backend, ParsesUrlAndKeyAndRefusesTheRest) {
  auto b = parse_backend("http://127.0.0.1:9000,key=secret");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->url.port, 9000);
  EXPECT_EQ(b->api_key, "secret");
  EXPECT_EQ(b->name, "http://127.0.0.1:9000");
  EXPECT_FALSE(parse_backend("https://x"));
  auto bad = parse_backend("http://x:1,weight=2");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("only ',key=KEY'"), std::string::npos) << bad.error().message();
  auto unknown = make_policy("nearest", backends(2), {});
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message().find("known: cache_aware, session"), std::string::npos);
}

TEST(Backend, HealthChecksMarkDownAndUpAndFailuresEjectAtMostHalf) {
  BackendPool pool(backends(4), HealthConfig{.fall = 2, .rise = 2, .eject_after = 3, .eject_base_seconds = 60});
  pool.health_check(0, false);
  EXPECT_TRUE(pool.snapshot()[0].available);
  pool.health_check(0, false);
  EXPECT_FALSE(pool.snapshot()[0].available);
  pool.health_check(0, true);
  EXPECT_FALSE(pool.snapshot()[0].available);
  pool.health_check(0, true);
  EXPECT_TRUE(pool.snapshot()[0].available);
  // In-flight counts are the router's own: a health check leaves them alone.
  pool.begin(1);
  pool.health_check(1, true);
  EXPECT_EQ(pool.snapshot()[1].in_flight, 1);
  pool.end(1, Outcome::kSuccess);
  // Failures in a row eject; a 429 is load, not failure; at most half the replicas go.
  for (int b : {0, 1, 2}) {
    for (int i = 0; i < 3; ++i) {
      pool.begin(b);
      pool.end(b, i == 1 && b == 2 ? Outcome::kOverloaded : Outcome::kFailure);
    }
  }
  const auto v = pool.snapshot();
  EXPECT_FALSE(v[0].available);
  EXPECT_FALSE(v[1].available);
  EXPECT_TRUE(v[2].available);  // only 2 failures in a row, and half are out already
  EXPECT_EQ(pool.stats()[0].ejections, 1);
  // Seen down and up again by the health checks: a new process, no longer ejected, and ramping up
  // (slow start) from a tenth of its share.
  for (bool passed : {false, false, true, true}) pool.health_check(0, passed);
  EXPECT_TRUE(pool.snapshot()[0].available);
  EXPECT_LT(pool.snapshot()[0].ramp, 0.2);
  EXPECT_EQ(pool.snapshot()[2].ramp, 1.0);
  EXPECT_FALSE(pool.snapshot()[1].available);  // still ejected: its checks never failed
}

TEST(Policies, EveryPolicyChoosesOnlyAvailableAndNotExcludedReplicas) {
  for (const std::string& name : policy_names()) {
    auto p = policy(name, 4);
    std::vector<BackendView> v = views(4);
    v[1].available = false;
    const std::vector<int> exclude = {2};
    for (int i = 0; i < 50; ++i) {
      const std::string key = fmt::format("session-{}", i);
      const Decision d = p->choose({key, "some prompt text"}, v, exclude);
      ASSERT_TRUE(d.backend == 0 || d.backend == 3) << name << " chose " << d.backend;
    }
    for (BackendView& b : v) b.available = false;
    EXPECT_EQ(p->choose({}, v, {}).backend, -1) << name;
  }
}

// A replica ramping up after coming back (slow start) looks busier to the load-aware policies and
// takes fewer requests under the cap.
TEST(Policies, ARampingReplicaTakesASmallerShare) {
  std::vector<BackendView> v = views(2);
  v[0].ramp = 0.25;
  v[0].in_flight = 1;  // as loaded as 4 at full share
  v[1].in_flight = 2;
  EXPECT_EQ(policy("least_load", 2)->choose({}, v, {}).backend, 1);
  EXPECT_TRUE(v[0].under_cap(8));   // 1 < ceil(8 x 0.25)
  v[0].in_flight = 2;
  EXPECT_FALSE(v[0].under_cap(8));
  v[0].in_flight = 0;
  v[0].ramp = 0.1;
  EXPECT_TRUE(v[0].under_cap(2));   // never below one
}

TEST(Policies, RoundRobinCyclesAndLeastLoadAndPowerOfTwoPreferTheIdle) {
  auto rr = policy("round_robin", 3);
  std::vector<int> seen;
  for (int i = 0; i < 6; ++i) seen.push_back(rr->choose({}, views(3), {}).backend);
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2, 0, 1, 2}));
  std::vector<BackendView> v = views(3);
  v[0].in_flight = 5;
  v[1].in_flight = 1;
  v[1].waiting = 3;  // reported by the replica: counts as load
  v[2].in_flight = 2;
  EXPECT_EQ(policy("least_load", 3)->choose({}, v, {}).backend, 2);
  // Power of two never picks the most loaded of three (it always loses its pair).
  auto p2 = policy("power_of_two", 3);
  for (int i = 0; i < 100; ++i) EXPECT_NE(p2->choose({}, v, {}).backend, 0);
}

// The same key maps to the same replica from any router instance (no shared state), and keys
// spread over all replicas.
TEST(Policies, SessionIsStickyAcrossInstancesAndSpreadsKeys) {
  auto a = policy("session", 4);
  auto b = policy("session", 4);
  std::map<int, int> per_replica;
  for (int i = 0; i < 400; ++i) {
    const std::string key = fmt::format("user-{}", i);
    const Decision da = a->choose({key, ""}, views(4), {});
    EXPECT_EQ(da.kind, DecisionKind::kSticky);
    EXPECT_EQ(da.backend, b->choose({key, ""}, views(4), {}).backend);
    ++per_replica[da.backend];
  }
  ASSERT_EQ(per_replica.size(), 4u);
  for (const auto& [r, n] : per_replica) EXPECT_GT(n, 50) << "replica " << r;
  // Its replica down: the key walks on, and comes back when it returns.
  std::vector<BackendView> v = views(4);
  const int own = a->choose({"user-1", ""}, v, {}).backend;
  v[own].available = false;
  const Decision moved = a->choose({"user-1", ""}, v, {});
  EXPECT_NE(moved.backend, own);
  EXPECT_EQ(moved.kind, DecisionKind::kSpill);
  v[own].available = true;
  EXPECT_EQ(a->choose({"user-1", ""}, v, {}).backend, own);
  // No key: the least loaded.
  v[0].in_flight = 3, v[1].in_flight = 3, v[2].in_flight = 0, v[3].in_flight = 3;
  const Decision none = a->choose({"", ""}, v, {});
  EXPECT_EQ(none.backend, 2);
  EXPECT_EQ(none.kind, DecisionKind::kFallback);
}

// Bounded load under a skewed key distribution: one session sends half the traffic, and no
// replica ever holds more than ceil(1.25 x average) requests in flight.
TEST(Policies, SessionLoadStaysUnderTheCapWithOneHotSession) {
  for (const char* name : {"session", "cache_aware"}) {
    auto p = policy(name, 4);
    std::vector<BackendView> v = views(4);
    int64_t total = 0;
    for (int i = 0; i < 400; ++i) {
      const std::string key = i % 2 == 0 ? "hot" : fmt::format("user-{}", i);
      const Decision d = p->choose({key, ""}, v, {});
      ASSERT_GE(d.backend, 0);
      ++v[d.backend].in_flight;
      ++total;
      const int64_t cap = static_cast<int64_t>(std::ceil(1.25 * static_cast<double>(total) / 4.0));
      for (const BackendView& b : v) ASSERT_LE(b.in_flight, cap) << name << " after " << total;
      // Requests finish now and then, so the load moves.
      if (i % 3 == 2) {
        for (BackendView& b : v) {
          if (b.in_flight > 0) --b.in_flight, --total;
        }
      }
    }
  }
}

TEST(PrefixIndex, ChainedChunksMatchLeadingPrefixesOnlyAndExpire) {
  PrefixIndex index(4, 1000);
  const auto now = Clock::now();
  const auto h = index.chunk_hashes("aaaabbbbccccdd");  // 3 whole chunks
  ASSERT_EQ(h.size(), 3u);
  EXPECT_NE(index.chunk_hashes("xxxxbbbb")[1], h[1]);  // a chunk stands for its whole prefix
  index.insert(h, 1, std::chrono::seconds(10), now);
  EXPECT_EQ(index.match(index.chunk_hashes("aaaabbbbzzzz"), 3, now), (std::vector<int32_t>{0, 2, 0}));
  EXPECT_EQ(index.match(h, 3, now + std::chrono::seconds(11)), (std::vector<int32_t>{0, 0, 0}));
  // Bounded: the least recently used prefixes go first.
  PrefixIndex small(4, 4);
  small.insert(small.chunk_hashes("aaaabbbb"), 0, std::chrono::seconds(10), now);
  small.insert(small.chunk_hashes("ccccdddd"), 0, std::chrono::seconds(10), now);
  small.insert(small.chunk_hashes("eeeeffff"), 0, std::chrono::seconds(10), now);
  EXPECT_LE(small.num_entries(), 4u);
  EXPECT_EQ(small.match(small.chunk_hashes("eeeeffff"), 1, now)[0], 2);
  EXPECT_EQ(small.match(small.chunk_hashes("aaaabbbb"), 1, now)[0], 0);
}

// A prompt routed once goes to the same replica next time (even before the first finished: a
// prediction); a shared prefix spreads once its replica is loaded, under the cap.
TEST(Policies, CacheAwareFollowsThePrefixAndSpreadsASharedOne) {
  auto p = policy("cache_aware", 4);
  std::vector<BackendView> v = views(4);
  const std::string system(640, 's');  // 10 chunks
  const Decision first = p->choose({"", system + "question one"}, v, {});
  EXPECT_EQ(first.kind, DecisionKind::kBalanced);
  const Decision second = p->choose({"", system + "question two"}, v, {});
  EXPECT_EQ(second.backend, first.backend);
  EXPECT_EQ(second.kind, DecisionKind::kCacheHit);
  // Its replica busy (load 2 x 8 chunks > the 10 chunks to compute elsewhere): another one.
  v[first.backend].in_flight = 2;
  const Decision third = p->choose({"", system + "question three"}, v, {});
  EXPECT_NE(third.backend, first.backend);
  // Many requests with one shared prefix: every replica gets some, none above the cap.
  auto q = policy("cache_aware", 4);
  std::vector<BackendView> w = views(4);
  std::set<int> used;
  for (int i = 0; i < 40; ++i) {
    const Decision d = q->choose({"", system + fmt::format("q{}", i)}, w, {});
    ++w[d.backend].in_flight;
    used.insert(d.backend);
    q->routed({"", system}, d.backend, true);
  }
  EXPECT_EQ(used.size(), 4u);
  for (const BackendView& b : w) EXPECT_LE(b.in_flight, 13);  // ceil(1.25 x 40 / 4)
  // A session key is honoured first.
  const Decision s1 = q->choose({"alice", "other text entirely, long enough to make some chunks......"}, views(4), {});
  EXPECT_EQ(s1.kind, DecisionKind::kSticky);
  EXPECT_EQ(policy("session", 4)->choose({"alice", ""}, views(4), {}).backend, s1.backend);
}

TEST(Policies, StableHashIsSpecified) {
  // FNV-1a, then SplitMix64's finalizer; the values from an independent Python version. Pinned:
  // routers of different builds must place every session alike.
  EXPECT_EQ(stable_hash(""), 0xf52a15e9a9b5e89bULL);
  EXPECT_EQ(stable_hash("session-42"), 0x666a265472405471ULL);
}

}  // namespace
}  // namespace sluice::router
