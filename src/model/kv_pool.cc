#include "model/kv_pool.h"

namespace sluice {

KvPool::KvPool(const ModelConfig& config, int32_t num_blocks, int32_t block_size)
    : num_blocks_(num_blocks), block_size_(block_size), kv_dim_(config.kv_dim()) {
  data_.resize(static_cast<size_t>(2) * config.num_layers * num_slots() * kv_dim_);
}

}  // namespace sluice
