#include "router/prefix_index.h"

#include <algorithm>

#include "router/policy.h"

namespace sluice::router {

PrefixIndex::PrefixIndex(size_t chunk_bytes, size_t max_entries)
    : chunk_bytes_(std::max<size_t>(1, chunk_bytes)), max_entries_(std::max<size_t>(1, max_entries)) {}

std::vector<uint64_t> chunk_hashes(std::string_view text, size_t chunk_bytes) {
  std::vector<uint64_t> hashes;
  uint64_t h = 0;
  for (size_t at = 0; at + chunk_bytes <= text.size(); at += chunk_bytes) {
    h = stable_hash(text.substr(at, chunk_bytes), h);
    hashes.push_back(h);
  }
  return hashes;
}

std::vector<uint64_t> PrefixIndex::chunk_hashes(std::string_view text) const {
  return router::chunk_hashes(text, chunk_bytes_);
}

std::vector<int32_t> PrefixIndex::match(const std::vector<uint64_t>& hashes, size_t num_backends,
                                        Clock::time_point now) {
  std::vector<int32_t> matched(num_backends, 0);
  std::vector<bool> still(num_backends, true);  // matched every hash so far
  MutexLock lock(mu_);
  for (size_t i = 0; i < hashes.size(); ++i) {
    auto it = entries_.find(hashes[i]);
    if (it == entries_.end()) break;
    Entry& e = it->second;
    lru_.splice(lru_.begin(), lru_, e.lru);
    std::vector<bool> here(num_backends, false);
    for (const Holder& h : e.holders) {
      if (h.expires > now && static_cast<size_t>(h.backend) < num_backends) here[h.backend] = true;
    }
    bool any = false;
    for (size_t b = 0; b < num_backends; ++b) {
      still[b] = still[b] && here[b];
      if (still[b]) ++matched[b], any = true;
    }
    if (!any) break;
  }
  return matched;
}

void PrefixIndex::insert(const std::vector<uint64_t>& hashes, int backend, Clock::duration ttl,
                         Clock::time_point now) {
  const Clock::time_point expires = now + ttl;
  MutexLock lock(mu_);
  for (uint64_t hash : hashes) {
    auto [it, inserted] = entries_.try_emplace(hash);
    Entry& e = it->second;
    if (inserted) {
      lru_.push_front(hash);
      e.lru = lru_.begin();
    } else {
      lru_.splice(lru_.begin(), lru_, e.lru);
    }
    // Drop expired holders; refresh or add this one.
    const size_t before = e.holders.size();
    std::erase_if(e.holders, [&](const Holder& h) { return h.expires <= now && h.backend != backend; });
    num_holders_ -= before - e.holders.size();
    auto h = std::find_if(e.holders.begin(), e.holders.end(), [&](const Holder& x) { return x.backend == backend; });
    if (h == e.holders.end()) {
      e.holders.push_back({backend, expires});
      ++num_holders_;
    } else {
      h->expires = std::max(h->expires, expires);
    }
  }
  evict();
}

void PrefixIndex::forget(int backend) {
  MutexLock lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    Entry& e = it->second;
    num_holders_ -= std::erase_if(e.holders, [&](const Holder& h) { return h.backend == backend; });
    if (e.holders.empty()) {
      lru_.erase(e.lru);
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
}

void PrefixIndex::evict() {
  while (num_holders_ > max_entries_ && !lru_.empty()) {
    auto it = entries_.find(lru_.back());
    num_holders_ -= it->second.holders.size();
    entries_.erase(it);
    lru_.pop_back();
  }
}

size_t PrefixIndex::num_entries() const {
  MutexLock lock(mu_);
  return num_holders_;
}

}  // namespace sluice::router
