// Routing policies: which replica a request goes to (`sluice route --policy NAME`). One
// interface, one file each under policies/:
//   round_robin   the available replicas in turn
//   random        one uniformly at random
//   least_load    the least loaded: the router's in-flight requests there plus the waiting
//                 requests it reports on /metrics
//   power_of_two  two at random, the less loaded of them (Mitzenmacher's power of two choices)
//   session       consistent hashing of the session key, with bounded load (policies/session.cc)
//   cache_aware   the replica likely to hold the prompt's prefix, at a cost that counts its load
//                 (policies/cache_aware.cc); the default
//
// A policy chooses among the candidates: replicas available and not excluded (those a retry
// already tried). It sees a snapshot of their load and weight; what it learns (a prefix index)
// it keeps itself, told by routed() where each request went. Weights: round_robin and random
// give each replica requests in proportion to its weight; the load-aware policies compare load
// per unit of weight, and the bounded-load cap of a replica is proportional to its weight; the
// session ring gives it points in proportion.
//
// The replicas present change while the router runs (admin API, DNS discovery): set_members()
// is told every change, and a replica's index is never reused while a request or a policy could
// still mean the old one by it (backend.h), except through forget(): a slot given to a new replica.
//
// Thread-safety: choose() and routed() may be called from many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "router/backend.h"

namespace sluice::router {

struct RouteRequest {
  std::string_view session_key;  // empty: none
  std::string_view prompt;       // the prompt's text, in order (chat: each message's role and content)
};

// What a decision was, for the metrics: the session's own replica, one the session or prefix
// spilled to because its own was at the load cap or down, a replica holding the prompt's prefix,
// the cheapest by load, or a policy without a preference.
enum class DecisionKind { kSticky, kSpill, kCacheHit, kBalanced, kFallback };
std::string_view decision_kind_name(DecisionKind kind);

struct Decision {
  int backend = -1;  // -1: no candidate
  DecisionKind kind = DecisionKind::kBalanced;
  // cache_aware: the prompt's chunks, and those the chosen replica was believed to hold (the
  // router's prediction, set against the cached tokens the replica then reports).
  int32_t prompt_chunks = 0, predicted_chunks = 0;
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;
  // `exclude`: replica indices not to choose (already tried for this request).
  virtual Decision choose(const RouteRequest& request, std::span<const BackendView> backends,
                          std::span<const int> exclude) = 0;
  // The request was sent to `backend`; `succeeded` once it completed there.
  virtual void routed(const RouteRequest& /*request*/, int /*backend*/, bool /*succeeded*/) {}
  // The replicas present now, with their weights (after an add, a removal or a new weight).
  virtual void set_members(std::span<const Member> /*members*/) {}
  // Slot `backend` now holds another replica: nothing learnt of the old one applies.
  virtual void forget(int /*backend*/) {}
};

struct PolicyOptions {
  double load_factor = 1.25;     // bounded load: no replica above ceil(factor x average) in flight
  int virtual_nodes = 160;       // points per replica on the session ring
  size_t chunk_bytes = 64;       // cache_aware: text chunk of the prefix index (~16 tokens)
  size_t index_entries = 1 << 18;  // cache_aware: the index's size bound (chunk hashes x replicas)
  double entry_ttl_seconds = 600;  // cache_aware: how long a served prefix is believed cached
  double predicted_ttl_seconds = 30;  // cache_aware: a prefix routed but not yet served
  double load_weight = 8;        // cache_aware: one request of load costs as many uncached chunks
  uint64_t seed = 0;             // random choices (random, power_of_two); 0: from the clock
};

// The names above; anything else is an error listing them.
Result<std::unique_ptr<Policy>> make_policy(std::string_view name, std::span<const Member> members,
                                            const PolicyOptions& options);
std::vector<std::string> policy_names();

// Shared by the policies (policy.cc).
// The candidates' indices, ascending.
std::vector<int> candidates(std::span<const BackendView> backends, std::span<const int> exclude);
// The bounded-load cap (Mirrokni, Thorup and Zadimoghaddam, "Consistent hashing with bounded
// loads", 2018), per unit of weight: with the new request counted, factor x in-flight / the
// candidates' total weight; a replica's own cap is ceil(that x its weight x its ramp), at least 1
// (BackendView::under_cap). With equal weights: ceil(factor x in-flight / candidates).
double load_cap(std::span<const BackendView> backends, std::span<const int> candidates, double factor);
// The least loaded candidate (ties: the lowest index), or -1.
int least_loaded(std::span<const BackendView> backends, std::span<const int> candidates);
// A 64-bit hash specified here (FNV-1a, then SplitMix64's finalizer), the same in every build,
// so that every router instance maps a session alike.
uint64_t stable_hash(std::string_view bytes, uint64_t seed = 0);

// The policies (policies/*.cc).
std::unique_ptr<Policy> make_round_robin();
std::unique_ptr<Policy> make_random(uint64_t seed);
std::unique_ptr<Policy> make_least_load();
std::unique_ptr<Policy> make_power_of_two(uint64_t seed);
std::unique_ptr<Policy> make_session(std::span<const Member> members, const PolicyOptions& options);
std::unique_ptr<Policy> make_cache_aware(std::span<const Member> members, const PolicyOptions& options);

}  // namespace sluice::router
