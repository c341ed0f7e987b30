// The consistent-hashing ring with bounded load that `session` routes by and `cache_aware`
// honours first (policies/session.cc explains it).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "router/policy.h"

namespace sluice::router {

class SessionRing {
 public:
  SessionRing(const std::vector<BackendConfig>& backends, int virtual_nodes);
  // The session's replica: the first candidate clockwise from the key's point under `cap`
  // (BackendView::under_cap: scaled down while it ramps up after coming back); kSticky when that is the first replica on the walk (its own), kSpill
  // when the walk passed others (down, excluded or full). -1 if every candidate is full.
  Decision place(std::string_view key, std::span<const BackendView> backends, std::span<const int> candidates,
                 int64_t cap) const;

 private:
  std::vector<std::pair<uint64_t, int>> points_;  // (point, replica), ascending
  size_t num_backends_;
};

}  // namespace sluice::router
