#include "model/kv_pool.h"

#include <cstdlib>
#include <new>

namespace sluice {

KvPool::KvPool(const ModelConfig& config, int32_t num_blocks, int32_t block_size, KvType type)
    : num_blocks_(num_blocks), block_size_(block_size), kv_dim_(config.kv_dim()), type_(type) {
  bytes_ = size_t{2} * config.num_layers * layer_bytes();
  // Zeroed, so a stale slot can never hold a NaN that a masked-out score would multiply.
  // calloc rather than new[]: a pool this large comes straight from mmap as zero pages the
  // kernel maps on first touch, so start-up does not write (and commit) gigabytes up front.
  data_.reset(static_cast<uint8_t*>(std::calloc(bytes_, 1)));
  if (!data_) throw std::bad_alloc();
}

}  // namespace sluice
