// Eviction policies for the prefix cache: which unreferenced cached KV block gives way when
// the pool needs a block.
//
// The cache (kv_cache.h) decides which blocks are candidates — cached, held by no sequence,
// and a leaf (no cached child: a prefix is evicted from its end, so a child is never left
// without its parent) — and tells the policy when a block is used. The policy only orders the
// candidates. Times come from the engine's injected clock, so tests can check orders exactly;
// ties go to the block that became a candidate first.
//
//   lru     least recently used first (the default)
//   lfu     fewest uses first, then least recently used
//   pinned  as lru, but blocks of pinned prefixes (--pin-prefix) are never candidates
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string_view>
#include <tuple>
#include <vector>

#include "common/status.h"

namespace sluice {

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  virtual std::string_view name() const = 0;
  // Whether pinned blocks are kept out of the candidates.
  virtual bool protects_pinned() const { return false; }

  // A block was used (taken by a sequence, or released by one) at `now`.
  virtual void touch(int32_t block_id, double now) = 0;
  // A block enters or leaves the candidates.
  virtual void add_candidate(int32_t block_id) = 0;
  virtual void remove_candidate(int32_t block_id) = 0;
  virtual bool has_candidate() const = 0;
  // The candidate to evict next. REQUIRES: has_candidate().
  virtual int32_t victim() const = 0;
  // Forgets a block's history (it was evicted, or reused for other tokens).
  virtual void forget(int32_t block_id) = 0;
};

// "lru", "lfu", "pinned" -> a policy over num_blocks blocks; errors name the choices.
Result<std::unique_ptr<EvictionPolicy>> make_eviction_policy(std::string_view name, int32_t num_blocks);
std::vector<std::string_view> eviction_policy_names();

}  // namespace sluice
