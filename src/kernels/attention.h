// Causal attention over a paged KV cache.
//
// Keys and values of one layer live in slots: slot = block_id * block_size + offset, each
// slot holding n_kv_heads rows of head_dim elements, f32 or f16 (KvType), laid out by kv head
// (kv_row_offset). A token at position p of
// sequence s attends to positions 0..p of s, found through s's block table. Scores are
// reduced over keys in ascending position, so a token's output does not depend on the rest of
// the batch, on how its sequence's prompt was chunked, or on which physical blocks hold its keys.
//
// Work is split over (token, kv head) pairs: the heads of one GQA group share each key and
// value row, which is loaded (and widened from f16) once for all of them.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/thread_pool.h"

namespace sluice::kernels {

enum class KvType { kF32, kF16 };
std::string_view kv_type_name(KvType t);
size_t kv_type_size(KvType t);

struct AttentionShape {
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  float scale = 1.0f;  // usually 1/sqrt(head_dim)
};

struct PagedKv {
  const void* k = nullptr;  // [num_kv_heads, num_blocks, block_size, head_dim] of `type`
  const void* v = nullptr;  // the same for the values
  int32_t block_size = 0;
  int64_t num_blocks = 0;
  KvType type = KvType::kF32;
};

struct AttentionBatch {
  const float* q = nullptr;               // [num_tokens, num_heads * head_dim]
  const int32_t* positions = nullptr;     // [num_tokens]
  const int32_t* seq_idx = nullptr;       // [num_tokens] row of block_table
  const int32_t* block_table = nullptr;   // [num_seqs, max_blocks_per_seq]
  int32_t max_blocks_per_seq = 0;
  int64_t num_tokens = 0;
};

// Where the row of kv head h of the token in `offset` of physical block `block` starts, in
// elements from the layer's K (or V) base: each kv head has its own region, in which the
// blocks' rows follow one another. So attention, which takes one kv head of one token at a
// time, reads a contiguous run per block (block_size * head_dim elements), and one long run
// where a sequence's blocks are consecutive, instead of head_dim elements out of every slot's
// num_kv_heads * head_dim: that pattern held it to a third of the read bandwidth.
inline int64_t kv_row_offset(const AttentionShape& s, int32_t block_size, int64_t num_blocks, int64_t block,
                             int64_t h, int64_t offset) {
  return ((h * num_blocks + block) * block_size + offset) * s.head_dim;
}

// Stores one token's keys (or values), [num_kv_heads * head_dim] floats, in slot `slot`
// (block slot / block_size, offset slot % block_size) of a layer's K (or V) cache of
// num_blocks blocks, as `type`.
void store_kv_token(KvType type, const AttentionShape& s, int32_t block_size, int64_t num_blocks, int64_t slot,
                    const float* src, void* cache);

// out: [num_tokens, num_heads * head_dim].
// REQUIRES: the keys/values of every attended position are already written.
void paged_attention(ThreadPool& pool, const AttentionShape& shape, const AttentionBatch& batch,
                     const PagedKv& kv, float* out);

// Writes n floats to dst as `type` (f16: round to nearest even, as F16C does).
void store_kv(KvType type, const float* src, int64_t n, void* dst);

}  // namespace sluice::kernels
