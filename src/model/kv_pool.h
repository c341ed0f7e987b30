// KvPool: the fixed memory that holds every layer's keys and values, in blocks.
//
// Sized once at start-up (DESIGN.md, invariant 3: bounded memory). Which blocks belong to
// which sequence is the engine's business (engine/block_pool); the pool only stores values,
// f16 (the default of the engine: half the memory, rounding to nearest even) or f32.
// Layout per layer: K and V each [num_blocks * block_size, kv_dim] elements.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>

#include "kernels/attention.h"
#include "model/config.h"

namespace sluice {

using kernels::KvType;

class KvPool {
 public:
  KvPool(const ModelConfig& config, int32_t num_blocks, int32_t block_size, KvType type = KvType::kF32);

  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return block_size_; }
  int64_t num_slots() const { return int64_t{num_blocks_} * block_size_; }
  int64_t kv_dim() const { return kv_dim_; }
  KvType type() const { return type_; }
  size_t bytes() const { return bytes_; }

  // Base of layer's K or V rows; row `slot` starts at element slot * kv_dim.
  void* k(int32_t layer) { return data_.get() + (2 * size_t(layer)) * layer_bytes(); }
  void* v(int32_t layer) { return data_.get() + (2 * size_t(layer) + 1) * layer_bytes(); }
  const void* k(int32_t layer) const { return data_.get() + (2 * size_t(layer)) * layer_bytes(); }
  const void* v(int32_t layer) const { return data_.get() + (2 * size_t(layer) + 1) * layer_bytes(); }
  size_t row_bytes() const { return size_t(kv_dim_) * kernels::kv_type_size(type_); }

  // Bytes one token occupies across all layers: 2 x layers x kv_heads x head_dim x dtype size.
  static size_t bytes_per_token(const ModelConfig& config, KvType type) {
    return size_t{2} * config.num_layers * config.kv_dim() * kernels::kv_type_size(type);
  }

 private:
  size_t layer_bytes() const { return size_t(num_slots()) * row_bytes(); }

  int32_t num_blocks_;
  int32_t block_size_;
  int64_t kv_dim_;
  KvType type_;
  size_t bytes_;
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> data_;
};

}  // namespace sluice
