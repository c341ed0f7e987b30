#include "model/model.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/meminfo.h"
#include "kernels/attention.h"
#include "kernels/kernel_path.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"

namespace sluice {

Result<std::unique_ptr<Model>> Model::load(std::unique_ptr<gguf::File> file, LoadOptions options) {
  std::unique_ptr<Model> m(new Model());
  SLUICE_ASSIGN_OR_RETURN(m->config_, ModelConfig::from_gguf(*file));
  SLUICE_ASSIGN_OR_RETURN(m->weights_, ModelWeights::bind(*file, m->config_));
  m->file_ = std::move(file);
  if (options.repack && kernels::repack_weights()) {
    ThreadPool pool(0);
    // Unknown available memory (0): no budget to keep within.
    const int64_t available = available_memory_bytes();
    const bool budget = kernels::repack_within_budget() && available > 0;
    m->weights_.repack(pool, budget ? static_cast<size_t>(available / 2) : SIZE_MAX, kernels::repack_tile_form());
  }
  const ModelConfig& c = m->config_;
  m->inv_freq_.resize(c.rope_dim / 2);
  for (int32_t i = 0; i < c.rope_dim / 2; ++i) {
    double f = std::pow(static_cast<double>(c.rope_theta), -2.0 * i / c.rope_dim);
    if (m->weights_.rope_freq_factors) f /= m->weights_.rope_freq_factors[i];
    m->inv_freq_[i] = f / c.rope_linear_scale;
  }
  return m;
}

Status Model::validate(const ForwardBatch& b, const KvPool& kv) const {
  const int64_t n = b.num_tokens();
  if (b.positions.size() != static_cast<size_t>(n) || b.seq_idx.size() != static_cast<size_t>(n) ||
      b.slots.size() != static_cast<size_t>(n)) {
    return Status::error("batch arrays differ in length");
  }
  if (b.block_size != kv.block_size()) {
    return Status::error(fmt::format("batch block size {} differs from the pool's {}", b.block_size, kv.block_size()));
  }
  for (int64_t t = 0; t < n; ++t) {
    if (b.token_ids[t] < 0 || b.token_ids[t] >= config_.vocab_size) {
      return Status::error(fmt::format("token id {} is outside the vocabulary (0..{})", b.token_ids[t],
                                       config_.vocab_size - 1));
    }
    if (b.slots[t] < 0 || b.slots[t] >= kv.num_slots()) {
      return Status::error(fmt::format("KV slot {} is outside the pool ({} slots)", b.slots[t], kv.num_slots()));
    }
    if (b.seq_idx[t] < 0 || b.seq_idx[t] >= b.num_seqs() || b.positions[t] < 0 ||
        b.positions[t] / b.block_size >= b.max_blocks_per_seq) {
      return Status::error(fmt::format("token {} has position {} beyond its block table", t, b.positions[t]));
    }
    // Every position the token attends to must map to a real block.
    const int32_t* table = b.block_table.data() + int64_t{b.seq_idx[t]} * b.max_blocks_per_seq;
    for (int32_t blk = 0; blk <= b.positions[t] / b.block_size; ++blk) {
      if (table[blk] < 0 || table[blk] >= kv.num_blocks()) {
        return Status::error(fmt::format("sequence {} block {} is {}, not a pool block", b.seq_idx[t], blk, table[blk]));
      }
    }
  }
  for (int32_t i : b.logits_idx) {
    if (i < 0 || i >= n) return Status::error(fmt::format("logits index {} outside the batch", i));
  }
  return Status::ok();
}

void Model::rope_table(const ForwardBatch& b) {
  const int32_t half = config_.rope_dim / 2;
  cos_sin_.resize(b.num_tokens() * config_.rope_dim);
  for (int64_t t = 0; t < b.num_tokens(); ++t) {
    for (int32_t i = 0; i < half; ++i) {
      const double angle = b.positions[t] * inv_freq_[i];
      cos_sin_[t * config_.rope_dim + 2 * i] = static_cast<float>(std::cos(angle));
      cos_sin_[t * config_.rope_dim + 2 * i + 1] = static_cast<float>(std::sin(angle));
    }
  }
}

void Model::attention_block(int32_t layer, const ForwardBatch& b, KvPool& kv, ThreadPool& pool) {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_.layers[layer];
  const int64_t n = b.num_tokens();
  for (int64_t t = 0; t < n; ++t) kernels::rms_norm(&x_[t * c.dim], w.attn_norm, c.dim, c.rms_eps, &xn_[t * c.dim]);
  const kernels::MatmulTarget qkv[] = {{w.wq, q_.data()}, {w.wk, k_.data()}, {w.wv, v_.data()}};
  kernels::matmul_multi(pool, qkv, xn_.data(), n);
  const kernels::AttentionShape shape{c.num_heads, c.num_kv_heads, c.head_dim,
                                      1.0f / std::sqrt(static_cast<float>(c.head_dim))};
  for (int64_t t = 0; t < n; ++t) {
    float* q = &q_[t * c.q_dim()];
    float* k = &k_[t * c.kv_dim()];
    float* v = &v_[t * c.kv_dim()];
    if (w.bq) {
      kernels::add_inplace(q, w.bq, c.q_dim());
      kernels::add_inplace(k, w.bk, c.kv_dim());
      kernels::add_inplace(v, w.bv, c.kv_dim());
    }
    const float* cs = &cos_sin_[t * c.rope_dim];
    for (int32_t h = 0; h < c.num_heads; ++h) {
      float* qh = q + int64_t{h} * c.head_dim;
      if (w.q_norm) kernels::rms_norm(qh, w.q_norm, c.head_dim, c.rms_eps, qh);
      kernels::rope(qh, c.rope_dim, cs, c.rope_neox);
    }
    for (int32_t h = 0; h < c.num_kv_heads; ++h) {
      float* kh = k + int64_t{h} * c.head_dim;
      if (w.k_norm) kernels::rms_norm(kh, w.k_norm, c.head_dim, c.rms_eps, kh);
      kernels::rope(kh, c.rope_dim, cs, c.rope_neox);
    }
    kernels::store_kv_token(kv.type(), shape, kv.block_size(), kv.num_blocks(), b.slots[t], k, kv.k(layer));
    kernels::store_kv_token(kv.type(), shape, kv.block_size(), kv.num_blocks(), b.slots[t], v, kv.v(layer));
  }
  kernels::AttentionBatch ab{q_.data(), b.positions.data(), b.seq_idx.data(), b.block_table.data(),
                             b.max_blocks_per_seq, n};
  kernels::paged_attention(pool, shape, ab, {kv.k(layer), kv.v(layer), kv.block_size(), kv.num_blocks(), kv.type()}, att_.data());
  kernels::matmul(pool, w.wo, att_.data(), n, proj_.data());
  kernels::add_inplace(x_.data(), proj_.data(), n * c.dim);
}

void Model::ffn_block(int32_t layer, int64_t n, ThreadPool& pool) {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_.layers[layer];
  for (int64_t t = 0; t < n; ++t) kernels::rms_norm(&x_[t * c.dim], w.ffn_norm, c.dim, c.rms_eps, &xn_[t * c.dim]);
  const kernels::MatmulTarget gate_up[] = {{w.gate, gate_.data()}, {w.up, up_.data()}};
  kernels::matmul_multi(pool, gate_up, xn_.data(), n);
  // Per token, on the pool (exp is the costly part); each token's values are computed alike.
  pool.parallel_for(n, [&](int64_t b, int64_t e) {
    kernels::silu_mul(gate_.data() + b * c.ffn_dim, up_.data() + b * c.ffn_dim, (e - b) * c.ffn_dim);
  });
  kernels::matmul(pool, w.down, gate_.data(), n, proj_.data());
  kernels::add_inplace(x_.data(), proj_.data(), n * c.dim);
}

Status Model::forward(const ForwardBatch& b, KvPool& kv, ThreadPool& pool, std::vector<float>& logits) {
  if (Status s = validate(b, kv); !s) return s;
  const ModelConfig& c = config_;
  const int64_t n = b.num_tokens();
  x_.resize(n * c.dim);
  xn_.resize(n * c.dim);
  q_.resize(n * c.q_dim());
  k_.resize(n * c.kv_dim());
  v_.resize(n * c.kv_dim());
  att_.resize(n * c.q_dim());
  proj_.resize(n * c.dim);
  gate_.resize(n * c.ffn_dim);
  up_.resize(n * c.ffn_dim);
  for (int64_t t = 0; t < n; ++t) kernels::dequantize_row(weights_.token_embd, b.token_ids[t], &x_[t * c.dim]);
  rope_table(b);
  for (int32_t layer = 0; layer < c.num_layers; ++layer) {
    attention_block(layer, b, kv, pool);
    ffn_block(layer, n, pool);
  }
  const int64_t num_logits = static_cast<int64_t>(b.logits_idx.size());
  for (int64_t i = 0; i < num_logits; ++i) {
    kernels::rms_norm(&x_[int64_t{b.logits_idx[i]} * c.dim], weights_.output_norm, c.dim, c.rms_eps, &xn_[i * c.dim]);
  }
  logits.resize(num_logits * c.vocab_size);
  kernels::matmul(pool, weights_.output, xn_.data(), num_logits, logits.data());
  return Status::ok();
}

}  // namespace sluice
