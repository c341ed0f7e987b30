// KvPool: the fixed memory that holds every layer's keys and values, in blocks.
//
// Sized once at start-up (DESIGN.md, invariant 3: bounded memory). Which blocks belong to
// which sequence is the engine's business (engine/block_pool); the pool only stores values,
// f16 (the default of the engine: half the memory, rounding to nearest even) or f32.
// Layout per layer: K and V each [num_kv_heads, num_blocks, block_size, head_dim] elements
// (kernels::kv_row_offset: attention streams one kv head's rows, block after block).
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
  ~KvPool();
  KvPool(const KvPool&) = delete;
  KvPool& operator=(const KvPool&) = delete;

  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return block_size_; }
  int64_t num_slots() const { return int64_t{num_blocks_} * block_size_; }
  int64_t kv_dim() const { return kv_dim_; }
  KvType type() const { return type_; }
  size_t bytes() const { return bytes_; }

  // Base of layer's K or V cache; a slot's rows are placed by kernels::kv_row_offset.
  void* k(int32_t layer) { return data_ + (2 * size_t(layer)) * layer_bytes(); }
  void* v(int32_t layer) { return data_ + (2 * size_t(layer) + 1) * layer_bytes(); }
  const void* k(int32_t layer) const { return data_ + (2 * size_t(layer)) * layer_bytes(); }
  const void* v(int32_t layer) const { return data_ + (2 * size_t(layer) + 1) * layer_bytes(); }
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
  uint8_t* map_ = nullptr;  // the whole mapping, unmapped by the destructor
  size_t map_bytes_ = 0;
  uint8_t* data_ = nullptr;  // its 2 MiB aligned start
};

}  // namespace sluice
