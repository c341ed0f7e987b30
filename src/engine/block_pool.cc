#include "engine/block_pool.h"

#include "common/check.h"

namespace sluice {

BlockPool::BlockPool(int32_t num_blocks) : ref_counts_(num_blocks, 0) {
  SLUICE_CHECK(num_blocks > 0) << num_blocks;
  free_.reserve(num_blocks);
  // Block 0 on top of the stack: a fresh pool hands out ids in ascending order.
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

int32_t BlockPool::allocate() {
  SLUICE_CHECK(!free_.empty()) << "no free KV block";
  const int32_t b = free_.back();
  free_.pop_back();
  ref_counts_[b] = 1;
  return b;
}

void BlockPool::ref(int32_t block_id) {
  SLUICE_CHECK(ref_counts_[block_id] > 0) << "block " << block_id << " is free";
  ++ref_counts_[block_id];
}

void BlockPool::unref(int32_t block_id) {
  SLUICE_CHECK(ref_counts_[block_id] > 0) << "block " << block_id << " freed twice";
  if (--ref_counts_[block_id] == 0) free_.push_back(block_id);
}

}  // namespace sluice
