// session: the replicas of a session key (headers X-Session-ID, then X-User-ID, then the body's
// `user`: router.h) stay the same while they are healthy and not overloaded, so a conversation
// finds its KV cache warm.
//
// Consistent hashing with bounded load (Mirrokni, Thorup and Zadimoghaddam, 2018):
//   - every replica has `virtual_nodes` x its weight points on a 64-bit ring, at
//     stable_hash("NAME#i"), NAME its URL, so every router instance builds the same ring from the
//     same backend list with no shared state, and adding or removing a replica moves only the
//     keys next to its points;
//   - a key goes to the first replica clockwise from stable_hash(key) that is a candidate
//     (available, not already tried) and has fewer than ceil(1.25 x average) requests in flight,
//     the average over the candidates with the new request counted (per unit of weight: a
//     replica of weight 2 may hold twice as many). A key whose replica is full
//     walks on to the next one: no replica ever takes more than the cap, and a hot session
//     spills over its ring neighbours rather than melting its own replica.
// A request without a key goes to the least loaded candidate (kFallback).
#include "router/policies/session_ring.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace sluice::router {

SessionRing::SessionRing(std::span<const Member> members, int virtual_nodes) : num_members_(members.size()) {
  for (const Member& m : members) {
    const int points = std::max(1, static_cast<int>(std::lround(virtual_nodes * m.weight)));
    for (int v = 0; v < points; ++v) points_.push_back({stable_hash(fmt::format("{}#{}", m.name, v)), m.index});
    max_index_ = std::max(max_index_, m.index);
  }
  std::sort(points_.begin(), points_.end());
}

Decision SessionRing::place(std::string_view key, std::span<const BackendView> backends,
                            std::span<const int> candidates, double cap) const {
  if (points_.empty()) return {};
  const uint64_t h = stable_hash(key);
  size_t at = std::lower_bound(points_.begin(), points_.end(), std::pair<uint64_t, int>{h, -1}) - points_.begin();
  std::vector<bool> seen(max_index_ + 1, false);
  size_t distinct = 0;
  for (size_t step = 0; step < points_.size() && distinct < num_members_; ++step) {
    const int b = points_[(at + step) % points_.size()].second;
    if (seen[b]) continue;
    seen[b] = true;
    ++distinct;
    const bool candidate = std::find(candidates.begin(), candidates.end(), b) != candidates.end() &&
                           static_cast<size_t>(b) < backends.size();
    if (candidate && backends[b].under_cap(cap)) return {b, distinct == 1 ? DecisionKind::kSticky : DecisionKind::kSpill};
  }
  return {};
}

namespace {

class SessionPolicy : public Policy {
 public:
  SessionPolicy(std::span<const Member> members, const PolicyOptions& options)
      : ring_(members, options.virtual_nodes), factor_(options.load_factor) {}
  std::string_view name() const override { return "session"; }
  Decision choose(const RouteRequest& r, std::span<const BackendView> backends, std::span<const int> exclude) override {
    const std::vector<int> c = candidates(backends, exclude);
    if (r.session_key.empty()) return {least_loaded(backends, c), DecisionKind::kFallback};
    return ring_.get()->place(r.session_key, backends, c, load_cap(backends, c, factor_));
  }
  void set_members(std::span<const Member> members) override { ring_.set(members); }

 private:
  SharedSessionRing ring_;
  double factor_;
};

}  // namespace

std::unique_ptr<Policy> make_session(std::span<const Member> members, const PolicyOptions& options) {
  return std::make_unique<SessionPolicy>(members, options);
}

}  // namespace sluice::router
