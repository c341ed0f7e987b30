// KvPool: the fixed memory that holds every layer's keys and values, in blocks.
//
// Sized once at start-up (DESIGN.md, invariant 3: bounded memory). Which blocks belong to
// which sequence is the engine's business (engine/kv); the pool only stores floats.
// Layout per layer: K and V each [num_blocks * block_size, kv_dim].
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace sluice {

class KvPool {
 public:
  KvPool(const ModelConfig& config, int32_t num_blocks, int32_t block_size);

  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return block_size_; }
  int64_t num_slots() const { return int64_t{num_blocks_} * block_size_; }
  int64_t kv_dim() const { return kv_dim_; }
  size_t bytes() const { return data_.size() * sizeof(float); }

  float* k(int32_t layer) { return data_.data() + (2 * int64_t{layer}) * layer_floats(); }
  float* v(int32_t layer) { return data_.data() + (2 * int64_t{layer} + 1) * layer_floats(); }

  // Bytes one token occupies across all layers.
  static size_t bytes_per_token(const ModelConfig& config) {
    return size_t{2} * config.num_layers * config.kv_dim() * sizeof(float);
  }

 private:
  int64_t layer_floats() const { return num_slots() * kv_dim_; }

  int32_t num_blocks_;
  int32_t block_size_;
  int64_t kv_dim_;
  std::vector<float> data_;
};

}  // namespace sluice
