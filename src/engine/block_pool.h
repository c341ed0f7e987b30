// BlockPool: which KV blocks are in use, with reference counts and a free list.
//
// The KvPool (model/) holds the values; this class only hands out block ids. A block is free
// (reference count 0, on the free list) or held by one or more sequences (prompt-prefix
// sharing adds holders). Freed blocks are reused last-freed-first, so a busy pool keeps
// touching the same memory.
//
// Invariant: num_free() + number of blocks with a positive count == num_blocks().
// Thread-safety: owned by the engine thread; not thread-safe.
#pragma once

#include <cstdint>
#include <vector>

namespace sluice {

class BlockPool {
 public:
  explicit BlockPool(int32_t num_blocks);

  int32_t num_blocks() const { return static_cast<int32_t>(ref_counts_.size()); }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t num_used() const { return num_blocks() - num_free(); }
  int32_t ref_count(int32_t block_id) const { return ref_counts_[block_id]; }

  // Takes a free block, held once. REQUIRES: num_free() > 0.
  int32_t allocate();
  // Adds a holder to a held block.
  void ref(int32_t block_id);
  // Drops a holder; the block is free again when none is left.
  void unref(int32_t block_id);

 private:
  std::vector<int32_t> ref_counts_;  // [num_blocks]
  std::vector<int32_t> free_;        // stack of free block ids
};

}  // namespace sluice
