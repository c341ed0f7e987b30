// The routing policies, the prefix index and the replica pool, without a network.
#include <map>
#include <set>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "router/backend.h"
#include "router/discovery.h"
#include "router/policy.h"
#include "router/prefix_index.h"

namespace sluice::router {
namespace {

std::vector<BackendConfig> backends(int n) {
  std::vector<BackendConfig> out;
  for (int i = 0; i < n; ++i) out.push_back(*parse_backend(fmt::format("http://10.0.0.{}:8000", i + 1)));
  return out;
}

std::vector<Member> members(int n) {
  std::vector<Member> out;
  for (const BackendConfig& b : backends(n)) out.push_back({static_cast<int>(out.size()), b.name, b.weight});
  return out;
}

std::vector<BackendView> views(int n) {
  std::vector<BackendView> v;
  for (int i = 0; i < n; ++i) v.push_back({i, true, 0, 0, 0});
  return v;
}

std::unique_ptr<Policy> policy(std::string_view name, int n, PolicyOptions o = {}) {
  o.seed = 7;
  auto p = make_policy(name, members(n), o);
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
  auto weighted = parse_backend("http://x:1,weight=2.5,key=k");
  ASSERT_TRUE(weighted);
  EXPECT_EQ(weighted->weight, 2.5);
  EXPECT_EQ(weighted->api_key, "k");
  auto bad = parse_backend("http://x:1,colour=2");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("only ',key=KEY', ',weight=W' and ',version=V'"), std::string::npos)
      << bad.error().message();
  // A key is never echoed in an error (they reach logs and admin answers).
  auto keyed = parse_backend("https://x:1,key=sk-secret,weight=0");
  ASSERT_FALSE(keyed);
  EXPECT_EQ(keyed.error().message().find("sk-secret"), std::string::npos) << keyed.error().message();
  EXPECT_NE(keyed.error().message().find("backend 'https://x:1,key=***,weight=0'"), std::string::npos)
      << keyed.error().message();
  auto discovered = parse_discovery("dns:r:8000,key=sk-secret,weight=x");
  ASSERT_FALSE(discovered);
  EXPECT_EQ(discovered.error().message().find("sk-secret"), std::string::npos) << discovered.error().message();
  auto versioned = parse_backend("http://x:1,version=v2,weight=2");
  ASSERT_TRUE(versioned);
  EXPECT_EQ(versioned->version, "v2");
  EXPECT_EQ(parse_backend("http://x:1")->version, "");
  for (const char* w : {"http://x:1,weight=0", "http://x:1,weight=-1", "http://x:1,weight=two", "http://x:1,weight=1e9",
                        "http://x:1,weight=", "http://x:1,weight= 2", "http://x:1,weight=0x2", "http://x:1,",
                        "http://x:1,key=k,", "http://x:1,version="}) {
    EXPECT_FALSE(parse_backend(w)) << w;
  }
  auto twice = parse_backend("http://x:1,weight=2,weight=3");  // the second silently won
  ASSERT_FALSE(twice);
  EXPECT_NE(twice.error().message().find("'weight=' is given twice"), std::string::npos) << twice.error().message();
  EXPECT_EQ(*backend_name("http://127.0.0.1:9000/"), "http://127.0.0.1:9000");
  // An OpenAI base URL is not a replica's: its /v1 would come twice.
  for (const char* v1 : {"http://x:1/v1", "http://x:1/v1/", "http://x:1/llm/v1,key=k"}) {
    auto r = parse_backend(v1);
    ASSERT_FALSE(r) << v1;
    EXPECT_NE(r.error().message().find("without '/v1'"), std::string::npos) << r.error().message();
  }
  EXPECT_EQ(parse_backend("http://x:1/llm")->url.path, "/llm");  // a prefix behind a proxy
  auto unknown = make_policy("nearest", members(2), {});
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message().find("known: cache_aware, session"), std::string::npos);
}

TEST(Backend, HealthChecksMarkDownAndUpAndFailuresEjectAtMostHalf) {
  BackendPool pool(backends(4), HealthConfig{.fall = 2, .rise = 2, .eject_after = 3, .eject_base_seconds = 60});
  std::vector<std::string> events;  // what the router logs
  pool.set_on_event([&](const std::string& e) { events.push_back(e); });
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
  const std::string name0 = pool.config(0)->name, name1 = pool.config(1)->name;
  EXPECT_EQ(events, (std::vector<std::string>{
                        "replica " + name0 + ": down (2 health checks failed in a row)",
                        "replica " + name0 + ": up (2 health checks passed in a row)",
                        "replica " + name0 + ": ejected for 60 s after 3 failed requests in a row",
                        "replica " + name1 + ": ejected for 60 s after 3 failed requests in a row",
                        "replica " + name0 + ": down (2 health checks failed in a row)",
                        "replica " + name0 + ": up (2 health checks passed in a row)",
                    }));
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
  // The load-blind policies too: round_robin and random give it a tenth of a full share.
  v[0].ramp = 0.1;
  for (const char* name : {"round_robin", "random"}) {
    auto p = policy(name, 2);
    int to_ramping = 0;
    for (int i = 0; i < 1100; ++i) to_ramping += p->choose({}, v, {}).backend == 0;
    EXPECT_GT(to_ramping, 50) << name;   // about 100 of 1100
    EXPECT_LT(to_ramping, 150) << name;
  }
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

// Slots: a removed replica leaves routing at once, keeps its slot while requests are in flight
// there, and the slot is reused under a new generation afterwards.
TEST(Backend, MembershipChangesKeepSlotsUntilTheirRequestsEnd) {
  BackendPool pool(backends(2), HealthConfig{});
  EXPECT_EQ(pool.size(), 2u);
  auto added = pool.add(*parse_backend("http://10.0.0.9:8000"), /*ramp=*/true);
  ASSERT_TRUE(added);
  EXPECT_EQ(*added, 2);
  EXPECT_LT(pool.snapshot()[2].ramp, 0.2);  // a new replica ramps up like one back up
  EXPECT_FALSE(pool.add(*parse_backend("http://10.0.0.9:8000"), false)) << "present already";
  BackendConfig heavy = *parse_backend("http://10.0.0.8:8000");
  heavy.weight = 0;
  EXPECT_FALSE(pool.add(heavy, false)) << "weight out of range";

  const uint64_t g1 = pool.generation(1);
  pool.begin(1);
  ASSERT_TRUE(pool.remove("http://10.0.0.2:8000").is_ok());
  EXPECT_FALSE(pool.remove("http://10.0.0.2:8000").is_ok()) << "already gone";
  EXPECT_NE(pool.generation(1), g1);
  EXPECT_FALSE(pool.snapshot()[1].available);
  EXPECT_EQ(pool.find("http://10.0.0.2:8000"), -1);
  EXPECT_EQ(pool.members().size(), 2u);
  EXPECT_EQ(pool.stats().size(), 2u);
  // Its request still in flight: a new replica gets a new slot, not this one.
  auto third = pool.add(*parse_backend("http://10.0.0.7:8000"), false);
  ASSERT_TRUE(third);
  EXPECT_EQ(*third, 3);
  pool.end(1, Outcome::kFailure);  // a removed replica's failure ejects nobody
  const uint64_t g2 = pool.generation(1);
  auto reused = pool.add(*parse_backend("http://10.0.0.6:8000"), false);
  ASSERT_TRUE(reused);
  EXPECT_EQ(*reused, 1);
  EXPECT_NE(pool.generation(1), g2);
  EXPECT_EQ(pool.config(1)->name, "http://10.0.0.6:8000");
  EXPECT_TRUE(pool.snapshot()[1].available);

  // Draining: listed, checked, not available; and back.
  ASSERT_TRUE(pool.drain("http://10.0.0.1:8000", true).is_ok());
  EXPECT_FALSE(pool.snapshot()[0].available);
  EXPECT_TRUE(pool.stats()[0].draining);
  ASSERT_TRUE(pool.drain("http://10.0.0.1:8000", false).is_ok());
  EXPECT_TRUE(pool.snapshot()[0].available);
  ASSERT_TRUE(pool.set_weight("http://10.0.0.1:8000", 3).is_ok());
  EXPECT_EQ(pool.snapshot()[0].weight, 3);
  EXPECT_FALSE(pool.set_weight("http://10.0.0.1:8000", 1000).is_ok());
  EXPECT_FALSE(pool.drain("http://10.9.9.9:1", true).is_ok());
}

TEST(Policies, WeightsSetEachReplicasShare) {
  std::vector<BackendView> v = views(3);
  v[0].weight = 2;
  // Smooth weighted round robin: 2:1:1, interleaved.
  auto rr = policy("round_robin", 3);
  std::vector<int> seen;
  for (int i = 0; i < 8; ++i) seen.push_back(rr->choose({}, v, {}).backend);
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2, 0, 0, 1, 2, 0}));
  std::map<int, int> drawn;
  auto random = policy("random", 3);
  for (int i = 0; i < 4000; ++i) ++drawn[random->choose({}, v, {}).backend];
  EXPECT_NEAR(drawn[0], 2000, 150);
  EXPECT_NEAR(drawn[1], 1000, 120);
  // Load per unit of weight: 3 in flight at weight 2 is lighter than 2 at weight 1.
  v[0].in_flight = 3, v[1].in_flight = 2, v[2].in_flight = 2;
  EXPECT_EQ(policy("least_load", 3)->choose({}, v, {}).backend, 0);
  // The bounded-load cap in proportion: 1.25 x (7 + 1) / 4 units = 2.5 per unit of weight.
  const std::vector<int> all = {0, 1, 2};
  const double cap = load_cap(v, all, 1.25);
  EXPECT_DOUBLE_EQ(cap, 2.5);
  EXPECT_TRUE(v[0].under_cap(cap));   // 3 < ceil(5)
  EXPECT_TRUE(v[1].under_cap(cap));   // 2 < ceil(2.5) = 3...
  v[1].in_flight = 3;
  EXPECT_FALSE(v[1].under_cap(cap));  // ...3 is not
}

// A replica of weight 2 holds about twice the sessions; a replica added moves only the keys that
// now map to it, and removing it again gives every key its old replica back.
TEST(Policies, SessionRingFollowsWeightsAndMembership) {
  std::vector<Member> m = members(4);
  m[0].weight = 2;
  PolicyOptions o;
  auto p = *make_policy("session", m, o);
  std::vector<BackendView> v = views(5);
  v[0].weight = 2;
  v[4].available = false;  // not yet a member
  std::map<int, int> per_replica;
  std::map<std::string, int> before;
  for (int i = 0; i < 2000; ++i) {
    const std::string key = fmt::format("user-{}", i);
    before[key] = p->choose({key, ""}, v, {}).backend;
    ++per_replica[before[key]];
  }
  EXPECT_NEAR(per_replica[0] / 800.0, 1.0, 0.2) << per_replica[0];  // 2 / 5 of 2000
  EXPECT_NEAR(per_replica[1] / 400.0, 1.0, 0.25) << per_replica[1];
  m.push_back({4, "http://10.0.0.5:8000", 1});
  p->set_members(m);
  v[4].available = true;
  int moved = 0;
  for (const auto& [key, was] : before) {
    const int now = p->choose({key, ""}, v, {}).backend;
    if (now != was) {
      ++moved;
      EXPECT_EQ(now, 4) << key << " moved between old replicas";
    }
  }
  EXPECT_NEAR(moved / 333.0, 1.0, 0.3) << moved;  // 1 / 6 of 2000
  m.pop_back();
  p->set_members(m);
  for (const auto& [key, was] : before) EXPECT_EQ(p->choose({key, ""}, v, {}).backend, was) << key;
}

TEST(Discovery, ParsesItsSpecAndReconcilesRounds) {
  auto d = parse_discovery("dns:sluice-replicas.default.svc.cluster.local:8000,key=k,weight=2");
  ASSERT_TRUE(d) << d.error().message();
  EXPECT_EQ(d->host, "sluice-replicas.default.svc.cluster.local");
  EXPECT_EQ(d->port, 8000);
  EXPECT_EQ(d->api_key, "k");
  EXPECT_EQ(d->weight, 2);
  EXPECT_EQ(d->spec, "dns:sluice-replicas.default.svc.cluster.local:8000") << "no key in metrics labels";
  for (const char* bad : {"srv:x:1", "dns:x", "dns::80", "dns:x:0", "dns:x:70000", "dns:x:80a", "dns:x/y:80",
                          "dns:x:80,colour=red"}) {
    EXPECT_FALSE(parse_discovery(bad)) << bad;
  }
  EXPECT_EQ(discovered_url("10.1.2.3", false, 8000), "http://10.1.2.3:8000");
  EXPECT_EQ(discovered_url("fd00::5", true, 8000), "http://[fd00::5]:8000");
  ASSERT_TRUE(parse_backend(discovered_url("fd00::5", true, 8000)));
  const std::set<std::string> known = {"http://a:1", "http://b:1"};
  const std::vector<std::string> resolved = {"http://c:1", "http://b:1", "http://c:1"};
  const MembershipChange c = reconcile(known, resolved);
  EXPECT_EQ(c.add, (std::vector<std::string>{"http://c:1"}));
  EXPECT_EQ(c.remove, (std::vector<std::string>{"http://a:1"}));
  EXPECT_TRUE(reconcile(known, std::vector<std::string>{"http://b:1", "http://a:1"}).add.empty());
}

TEST(PrefixIndex, ForgetDropsOneReplicasPrefixes) {
  PrefixIndex index(4, 1000);
  const auto now = Clock::now();
  const auto h = index.chunk_hashes("aaaabbbb");
  index.insert(h, 0, std::chrono::seconds(10), now);
  index.insert(h, 1, std::chrono::seconds(10), now);
  index.insert(index.chunk_hashes("cccc"), 1, std::chrono::seconds(10), now);
  EXPECT_EQ(index.num_entries(), 5u);
  index.forget(1);
  EXPECT_EQ(index.num_entries(), 2u);
  EXPECT_EQ(index.match(h, 2, now), (std::vector<int32_t>{2, 0}));
}

TEST(Policies, StableHashIsSpecified) {
  // FNV-1a, then SplitMix64's finalizer; the values from an independent Python version. Pinned:
  // routers of different builds must place every session alike.
  EXPECT_EQ(stable_hash(""), 0xf52a15e9a9b5e89bULL);
  EXPECT_EQ(stable_hash("session-42"), 0x666a265472405471ULL);
}

}  // namespace
}  // namespace sluice::router
