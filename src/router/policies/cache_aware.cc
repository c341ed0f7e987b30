// cache_aware (the default policy): send a request where its prompt's prefix is most likely
// already in the KV cache, unless that replica is too busy.
//
// The router has no view into the replicas' caches; it keeps its own approximate one
// (prefix_index.h): the prompt text is cut into 64-byte chunks (about 16 tokens, the engine's
// block), each named by a hash chained over the chunks before it, and the index remembers which
// replicas were sent which prefixes. For each request:
//   1. A session key, when present, is honoured first: the session ring's replica
//      (policies/session.cc) if it is under the load cap (kSticky).
//   2. Otherwise every candidate under the bounded-load cap, ceil(1.25 x average in flight), is
//      priced: cost = the prompt's chunks it would have to compute (those past its longest
//      indexed prefix) + load_weight (8 chunks) x its load (in flight + reported waiting, per
//      unit of weight). The
//      cheapest wins (ties: the lowest index): kCacheHit if it holds part of the prompt,
//      kBalanced if none does. A prefix every request shares (one system prompt) therefore
//      draws traffic only until its replica's load outweighs the chunks, and the cap bounds it
//      whatever the weights: it spreads, and the replicas it spreads to learn the prefix too.
//   3. The chosen replica is entered for every chunk of the prompt with a short expiry (30 s, a
//      prediction: the next request of a burst with the same new prefix follows it there before
//      the first has finished), made long (10 min) when the request completes there.
// Chunks of text rather than tokens: the router never tokenizes, so it works over any backend;
// chat requests are priced by their messages' roles and contents in order, which is what the
// template renders, so equal conversations give equal chunks.
#include <chrono>

#include "router/policies/session_ring.h"
#include "router/policy.h"
#include "router/prefix_index.h"

namespace sluice::router {
namespace {

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

class CacheAware : public Policy {
 public:
  CacheAware(std::span<const Member> members, const PolicyOptions& options)
      : ring_(members, options.virtual_nodes), options_(options), index_(options.chunk_bytes, options.index_entries) {}
  std::string_view name() const override { return "cache_aware"; }

  Decision choose(const RouteRequest& r, std::span<const BackendView> backends, std::span<const int> exclude) override {
    const std::vector<int> c = candidates(backends, exclude);
    if (c.empty()) return {};
    const double cap = load_cap(backends, c, options_.load_factor);
    Decision d;
    bool session_spilled = false;
    if (!r.session_key.empty()) {
      d = ring_.get()->place(r.session_key, backends, c, cap);
      if (d.kind == DecisionKind::kSticky) {
        const std::vector<uint64_t> hashes = index_.chunk_hashes(r.prompt);
        d.prompt_chunks = static_cast<int32_t>(hashes.size());
        d.predicted_chunks = index_.match(hashes, backends.size(), Clock::now())[d.backend];
        index_.insert(hashes, d.backend, seconds(options_.predicted_ttl_seconds), Clock::now());
        return d;
      }
      session_spilled = true;  // its replica is full, down or already tried: priced like the rest
    }
    const std::vector<uint64_t> hashes = index_.chunk_hashes(r.prompt);
    const std::vector<int32_t> matched = index_.match(hashes, backends.size(), Clock::now());
    double best_cost = 0;
    int32_t best_matched = 0;
    d = {};
    for (int b : c) {
      if (!backends[b].under_cap(cap)) continue;
      const double cost =
          static_cast<double>(hashes.size() - matched[b]) + options_.load_weight * backends[b].load();
      if (d.backend < 0 || cost < best_cost) d.backend = b, best_cost = cost, best_matched = matched[b];
    }
    if (d.backend < 0) return {};
    d.kind = best_matched > 0 ? DecisionKind::kCacheHit : DecisionKind::kBalanced;
    // A better-cached replica passed over because of the cap is a spill.
    for (int b : c) {
      if (matched[b] > best_matched) d.kind = DecisionKind::kSpill;
    }
    if (session_spilled) d.kind = DecisionKind::kSpill;
    d.prompt_chunks = static_cast<int32_t>(hashes.size());
    d.predicted_chunks = best_matched;
    index_.insert(hashes, d.backend, seconds(options_.predicted_ttl_seconds), Clock::now());
    return d;
  }

  void routed(const RouteRequest& r, int backend, bool succeeded) override {
    if (succeeded) index_.insert(index_.chunk_hashes(r.prompt), backend, seconds(options_.entry_ttl_seconds), Clock::now());
  }
  void set_members(std::span<const Member> members) override { ring_.set(members); }
  void forget(int backend) override { index_.forget(backend); }

 private:
  SharedSessionRing ring_;
  PolicyOptions options_;
  PrefixIndex index_;
};

}  // namespace

std::unique_ptr<Policy> make_cache_aware(std::span<const Member> members, const PolicyOptions& options) {
  return std::make_unique<CacheAware>(members, options);
}

}  // namespace sluice::router
