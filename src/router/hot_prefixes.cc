#include "router/hot_prefixes.h"

#include <algorithm>
#include <set>

#include "router/prefix_index.h"

namespace sluice::router {

HotPrefixes::HotPrefixes(size_t chunk_bytes, size_t max_hashes, size_t max_samples)
    : chunk_bytes_(std::max<size_t>(1, chunk_bytes)),
      max_hashes_(std::max<size_t>(1, max_hashes)),
      max_samples_(std::max<size_t>(1, max_samples)) {}

void HotPrefixes::observe(std::string_view prompt, std::string_view target, std::string_view body) {
  if (prompt.size() < chunk_bytes_ || body.size() > kMaxSampleBytes) return;
  const std::vector<uint64_t> hashes = chunk_hashes(prompt, chunk_bytes_);
  Sample kept{std::string(target), std::string(body)};  // copied before the lock is taken
  MutexLock lock(mu_);
  const uint64_t sample = next_sample_++;
  samples_[sample] = std::move(kept);
  while (samples_.size() > max_samples_) samples_.erase(samples_.begin());
  int32_t depth = 0;
  for (uint64_t h : hashes) {
    ++depth;
    auto [it, fresh] = counts_.try_emplace(h);
    Counted& c = it->second;
    if (fresh) {
      lru_.push_front(h);
      c.lru = lru_.begin();
    } else {
      lru_.splice(lru_.begin(), lru_, c.lru);
    }
    ++c.requests;
    c.depth = depth;
    c.sample = sample;
  }
  while (counts_.size() > max_hashes_) {
    counts_.erase(lru_.back());
    lru_.pop_back();
  }
}

std::vector<HotPrefixes::Hot> HotPrefixes::hottest(size_t n) const {
  MutexLock lock(mu_);
  std::vector<const Counted*> shared;
  for (const auto& [h, c] : counts_) {
    if (c.requests >= 2) shared.push_back(&c);
  }
  std::sort(shared.begin(), shared.end(), [](const Counted* a, const Counted* b) {
    if (a->requests != b->requests) return a->requests > b->requests;
    if (a->depth != b->depth) return a->depth > b->depth;
    return a->sample > b->sample;
  });
  std::vector<Hot> out;
  std::set<uint64_t> used;
  for (const Counted* c : shared) {
    if (out.size() >= n) break;
    auto s = samples_.find(c->sample);
    if (s == samples_.end() || !used.insert(c->sample).second) continue;
    out.push_back({s->second.target, s->second.body, c->requests, static_cast<size_t>(c->depth) * chunk_bytes_});
  }
  return out;
}

}  // namespace sluice::router
