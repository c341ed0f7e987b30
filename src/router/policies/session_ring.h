// The consistent-hashing ring with bounded load that `session` routes by and `cache_aware`
// honours first (policies/session.cc explains it).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "router/policy.h"

namespace sluice::router {

class SessionRing {
 public:
  // round(virtual_nodes x weight) points per member, at least one.
  SessionRing(std::span<const Member> members, int virtual_nodes);
  // The session's replica: the first candidate clockwise from the key's point under `cap`
  // (BackendView::under_cap: scaled down while it ramps up after coming back); kSticky when that is the first replica on the walk (its own), kSpill
  // when the walk passed others (down, excluded or full). -1 if every candidate is full.
  Decision place(std::string_view key, std::span<const BackendView> backends, std::span<const int> candidates,
                 double cap) const;

 private:
  std::vector<std::pair<uint64_t, int>> points_;  // (point, replica), ascending
  size_t num_members_ = 0;
  int max_index_ = -1;
};

// The ring of the replicas present, replaced whole when they change: a decision in progress
// keeps the ring it started with.
class SharedSessionRing {
 public:
  SharedSessionRing(std::span<const Member> members, int virtual_nodes)
      : virtual_nodes_(virtual_nodes), ring_(std::make_shared<const SessionRing>(members, virtual_nodes)) {}
  std::shared_ptr<const SessionRing> get() const {
    MutexLock lock(mu_);
    return ring_;
  }
  void set(std::span<const Member> members) {
    auto ring = std::make_shared<const SessionRing>(members, virtual_nodes_);
    MutexLock lock(mu_);
    ring_ = std::move(ring);
  }

 private:
  const int virtual_nodes_;
  mutable Mutex mu_;
  std::shared_ptr<const SessionRing> ring_ SLUICE_GUARDED_BY(mu_);
};

}  // namespace sluice::router
