// session: the replicas of a session key (headers X-Session-ID, then X-User-ID, then the body's
// `user`: router.h) stay the same while they are healthy and not overloaded, so a conversation
// finds its KV cache warm.
//
// Consistent hashing with bounded load (Mirrokni, Thorup and Zadimoghaddam, 2018):
//   - every replica has `virtual_nodes` points on a 64-bit ring, at stable_hash("NAME#i"), NAME
//     its URL, so every router instance builds the same ring from the same backend list with no
//     shared state, and adding or removing a replica moves only the keys next to its points;
//   - a key goes to the first replica clockwise from stable_hash(key) that is a candidate
//     (available, not already tried) and has fewer than ceil(1.25 x average) requests in flight,
//     the average over the candidates with the new request counted. A key whose replica is full
//     walks on to the next one: no replica ever takes more than the cap, and a hot session
//     spills over its ring neighbours rather than melting its own replica.
// A request without a key goes to the least loaded candidate (kFallback).
#include "router/policies/session_ring.h"

#include <algorithm>

#include <fmt/format.h>

namespace sluice::router {

SessionRing::SessionRing(const std::vector<BackendConfig>& backends, int virtual_nodes)
    : num_backends_(backends.size()) {
  for (size_t b = 0; b < backends.size(); ++b) {
    for (int v = 0; v < virtual_nodes; ++v) {
      points_.push_back({stable_hash(fmt::format("{}#{}", backends[b].name, v)), static_cast<int>(b)});
    }
  }
  std::sort(points_.begin(), points_.end());
}

Decision SessionRing::place(std::string_view key, std::span<const BackendView> backends,
                            std::span<const int> candidates, int64_t cap) const {
  if (points_.empty()) return {};
  const uint64_t h = stable_hash(key);
  size_t at = std::lower_bound(points_.begin(), points_.end(), std::pair<uint64_t, int>{h, -1}) - points_.begin();
  std::vector<bool> seen(num_backends_, false);
  size_t distinct = 0;
  for (size_t step = 0; step < points_.size() && distinct < num_backends_; ++step) {
    const int b = points_[(at + step) % points_.size()].second;
    if (seen[b]) continue;
    seen[b] = true;
    ++distinct;
    const bool candidate = std::find(candidates.begin(), candidates.end(), b) != candidates.end();
    if (candidate && backends[b].under_cap(cap)) return {b, distinct == 1 ? DecisionKind::kSticky : DecisionKind::kSpill};
  }
  return {};
}

namespace {

class SessionPolicy : public Policy {
 public:
  SessionPolicy(const std::vector<BackendConfig>& backends, const PolicyOptions& options)
      : ring_(backends, options.virtual_nodes), factor_(options.load_factor) {}
  std::string_view name() const override { return "session"; }
  Decision choose(const RouteRequest& r, std::span<const BackendView> backends, std::span<const int> exclude) override {
    const std::vector<int> c = candidates(backends, exclude);
    if (r.session_key.empty()) return {least_loaded(backends, c), DecisionKind::kFallback};
    return ring_.place(r.session_key, backends, c, load_cap(backends, c, factor_));
  }

 private:
  SessionRing ring_;
  double factor_;
};

}  // namespace

std::unique_ptr<Policy> make_session(const std::vector<BackendConfig>& backends, const PolicyOptions& options) {
  return std::make_unique<SessionPolicy>(backends, options);
}

}  // namespace sluice::router
