#include "router/policy.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "common/check.h"

namespace sluice::router {

std::string_view decision_kind_name(DecisionKind kind) {
  switch (kind) {
    case DecisionKind::kSticky: return "sticky";
    case DecisionKind::kSpill: return "spill";
    case DecisionKind::kCacheHit: return "cache_hit";
    case DecisionKind::kBalanced: return "balanced";
    case DecisionKind::kFallback: return "fallback";
  }
  return "unknown";
}

std::vector<std::string> policy_names() {
  return {"cache_aware", "session", "least_load", "power_of_two", "round_robin", "random"};
}

Result<std::unique_ptr<Policy>> make_policy(std::string_view name, std::span<const Member> members,
                                            const PolicyOptions& options) {
  const uint64_t seed =
      options.seed ? options.seed : static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  if (name == "round_robin") return make_round_robin();
  if (name == "random") return make_random(seed);
  if (name == "least_load") return make_least_load();
  if (name == "power_of_two") return make_power_of_two(seed);
  if (name == "session") return make_session(members, options);
  if (name == "cache_aware") return make_cache_aware(members, options);
  std::string known;
  for (const std::string& n : policy_names()) known += (known.empty() ? "" : ", ") + n;
  return Error(StatusCode::kInvalid, "unknown policy '{}' (known: {})", name, known);
}

std::vector<int> candidates(std::span<const BackendView> backends, std::span<const int> exclude) {
  std::vector<int> out;
  for (const BackendView& b : backends) {
    if (b.available && std::find(exclude.begin(), exclude.end(), b.index) == exclude.end()) out.push_back(b.index);
  }
  return out;
}

double load_cap(std::span<const BackendView> backends, std::span<const int> candidates, double factor) {
  if (candidates.empty()) return 0;
  int64_t total = 1;  // the new request
  double weight = 0;
  for (int i : candidates) total += backends[i].in_flight, weight += backends[i].weight;
  return factor * static_cast<double>(total) / weight;
}

int least_loaded(std::span<const BackendView> backends, std::span<const int> candidates) {
  int best = -1;
  for (int i : candidates) {
    if (best < 0 || backends[i].load() < backends[best].load()) best = i;
  }
  return best;
}

uint64_t stable_hash(std::string_view bytes, uint64_t seed) {
  uint64_t h = 0xcbf29ce484222325ULL ^ seed;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  return h ^ (h >> 31);
}

}  // namespace sluice::router
