#include "model/kv_pool.h"

namespace sluice {

KvPool::KvPool(const ModelConfig& config, int32_t num_blocks, int32_t block_size, KvType type)
    : num_blocks_(num_blocks), block_size_(block_size), kv_dim_(config.kv_dim()), type_(type) {
  bytes_ = size_t{2} * config.num_layers * layer_bytes();
  // Zeroed, so a stale slot can never hold a NaN that a masked-out score would multiply.
  data_ = std::make_unique<uint8_t[]>(bytes_);
}

}  // namespace sluice
