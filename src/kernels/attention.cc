#include "kernels/attention.h"

#include <algorithm>
#include <vector>

#include "kernels/ops.h"

namespace sluice::kernels {

void paged_attention(ThreadPool& pool, const AttentionShape& shape, const AttentionBatch& batch,
                     const PagedKv& kv, float* out) {
  const int64_t kv_dim = int64_t{shape.num_kv_heads} * shape.head_dim;
  const int64_t q_dim = int64_t{shape.num_heads} * shape.head_dim;
  const int32_t group = shape.num_heads / shape.num_kv_heads;
  const int64_t num_items = batch.num_tokens * shape.num_heads;
  pool.parallel_for(num_items, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / shape.num_heads;
      const int32_t h = static_cast<int32_t>(item % shape.num_heads);
      const int64_t kv_off = int64_t{h / group} * shape.head_dim;
      const float* q = batch.q + t * q_dim + int64_t{h} * shape.head_dim;
      const int32_t* table = batch.block_table + int64_t{batch.seq_idx[t]} * batch.max_blocks_per_seq;
      const int64_t num_keys = int64_t{batch.positions[t]} + 1;
      auto slot = [&](int64_t pos) {
        return int64_t{table[pos / kv.block_size]} * kv.block_size + pos % kv.block_size;
      };
      scores.resize(num_keys);
      for (int64_t j = 0; j < num_keys; ++j) {
        scores[j] = dot(q, kv.k + slot(j) * kv_dim + kv_off, shape.head_dim) * shape.scale;
      }
      softmax(scores.data(), num_keys);
      float* o = out + t * q_dim + int64_t{h} * shape.head_dim;
      std::fill(o, o + shape.head_dim, 0.0f);
      for (int64_t j = 0; j < num_keys; ++j) {
        const float* v = kv.v + slot(j) * kv_dim + kv_off;
        const float p = scores[j];
        for (int32_t d = 0; d < shape.head_dim; ++d) o[d] += p * v[d];
      }
    }
  });
}

}  // namespace sluice::kernels
