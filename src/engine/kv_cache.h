// KvCache: the KV blocks of the engine — reference counts, a free list, and the prefix index
// that lets requests share the blocks of a common prompt prefix, across time and concurrently.
//
// The prefix index is a tree of full blocks: a cached block is known by (its parent block,
// its block_size tokens), the root's children by (-1, tokens). Looking a block up hashes the
// tokens and the parent id, then compares the tokens, so a match is exact, never a hash guess.
// Because a block's identity includes its parent's, it stands for the whole prefix up to its
// end: matching walks from the root one block at a time and stops at the first miss.
//
// A block is in one of three states:
//   free      on the free list, holds nothing useful
//   held      ref_count > 0: in the block table of one or more sequences (cached or not)
//   cached    ref_count == 0 but indexed: its keys/values stay until it is evicted
// allocate() takes a free block, or evicts a cached one chosen by the eviction policy among the
// leaves (a cached block with no cached child), so a prefix shrinks from its end. A held
// block is never evicted (its holders' parents are held too).
//
// Invariant: num_free() + num_held() + num_cached() == num_blocks().
// Thread-safety: owned by the engine thread; not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/eviction.h"

namespace sluice {

struct KvCacheConfig {
  int32_t num_blocks = 0;
  int32_t block_size = 16;
  bool prefix_caching = true;
  std::string eviction = "lru";
  std::vector<std::vector<int32_t>> pinned_prefixes;  // token prefixes the "pinned" policy keeps
};

class KvCache {
 public:
  // REQUIRES: a valid eviction name (see make_eviction_policy), num_blocks > 0.
  KvCache(const KvCacheConfig& config, std::function<double()> clock);

  int32_t num_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  int32_t block_size() const { return config_.block_size; }
  bool prefix_caching() const { return config_.prefix_caching; }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t num_held() const { return num_held_; }
  int32_t num_cached() const { return num_cached_; }      // indexed, held by nobody
  int32_t num_pinned_cached() const;                       // of those, kept by the policy
  // Blocks allocate() can hand out now: free plus evictable cached ones.
  int32_t num_allocatable() const { return num_free() + num_cached_ - num_pinned_cached(); }
  // Blocks the pinned prefixes can come to keep for good (their distinct full blocks; 0 unless
  // the policy keeps them and prefix caching is on): what a sequence not on them cannot count on.
  int32_t pinned_reserve() const { return pinned_reserve_; }
  static int32_t pinned_reserve(const KvCacheConfig& config, bool policy_keeps_pinned);
  // Of those, how many the leading full blocks of `tokens` are (a sequence on a pinned prefix
  // holds them itself). Thread-safe: reads only the configuration.
  int32_t pinned_blocks_on(std::span<const int32_t> tokens) const;
  int64_t num_evictions() const { return num_evictions_; }
  int32_t ref_count(int32_t block_id) const { return blocks_[block_id].ref_count; }

  // Cached blocks holding the longest prefix of `tokens` made of full blocks that end at or
  // before max_tokens. Takes no reference. Empty when prefix caching is off.
  std::vector<int32_t> match(std::span<const int32_t> tokens, int32_t max_tokens) const;
  // Of `blocks`, how many taking lowers num_allocatable(): held by nobody and evictable (a kept
  // pinned block is not counted there).
  int32_t count_unheld(std::span<const int32_t> blocks) const;
  // Takes a reference on each block (from match()).
  void acquire(std::span<const int32_t> blocks);
  // A new block, held once. REQUIRES: num_allocatable() > 0.
  int32_t allocate();
  // Drops one reference; at zero a cached block stays cached, any other goes back to the free list.
  void release(int32_t block_id);

  // Indexes a full block whose tokens are `tokens` and whose parent is `parent_id` (-1: the
  // first block). Returns the cached block for that prefix: block_id itself, or another block
  // already indexed for the same prefix (block_id then stays private). REQUIRES: block_id is
  // held and not indexed; parent_id is indexed (or -1).
  int32_t commit(int32_t block_id, int32_t parent_id, std::span<const int32_t> tokens);
  bool is_cached(int32_t block_id) const { return blocks_[block_id].indexed; }

 private:
  struct Block {
    int32_t ref_count = 0;
    bool indexed = false;
    int32_t parent = -1;
    int32_t num_indexed_children = 0;
    int32_t depth = 0;      // blocks above it in its prefix
    uint64_t hash = 0;
    uint64_t pin_mask = 0;  // pinned prefixes this block lies on
    std::vector<int32_t> tokens;
  };
  uint64_t block_hash(int32_t parent_id, std::span<const int32_t> tokens) const;
  int32_t find(int32_t parent_id, std::span<const int32_t> tokens) const;
  bool evictable_leaf(const Block& b) const;
  void update_candidate(int32_t block_id);
  void evict(int32_t block_id);

  KvCacheConfig config_;
  std::function<double()> clock_;
  std::unique_ptr<EvictionPolicy> policy_;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_;  // stack
  std::unordered_multimap<uint64_t, int32_t> index_;
  int32_t num_held_ = 0;
  int32_t num_cached_ = 0;
  int32_t num_pinned_cached_ = 0;
  int32_t pinned_reserve_ = 0;
  int64_t num_evictions_ = 0;
};

}  // namespace sluice
