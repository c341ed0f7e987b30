// Model: a loaded transformer (llama / qwen2 / qwen3) and its batched forward pass.
//
// forward() runs any mix of tokens from several sequences in one pass: prompt chunks, single
// decode tokens, speculative drafts alike. Each token's keys/values are written to its KV slot
// before attention, so a token attends to earlier tokens of its own sequence whether they were
// computed in this pass or an earlier one. Every kernel reduces in a fixed order, so a token's
// logits are bit-identical however the batch around it is composed (DESIGN.md, invariant 1).
//
// Thread-safety: forward() is called by one thread at a time (the engine thread); it uses
// the given pool for parallel kernels and keeps scratch buffers between calls.
#pragma once

#include <memory>
#include <vector>

#include "common/status.h"
#include "common/thread_pool.h"
#include "gguf/gguf_reader.h"
#include "model/batch.h"
#include "model/config.h"
#include "model/kv_pool.h"
#include "model/weights.h"

namespace sluice {

class Model {
 public:
  struct LoadOptions {
    // Repack the quantized weights for the active kernel path where it reads a repacked form
    // (kernels::repack_weights); false keeps the file's blocks only (tests' reference).
    bool repack = true;
  };
  // Takes ownership of the file; weights stay views into it.
  static Result<std::unique_ptr<Model>> load(std::unique_ptr<gguf::File> file, LoadOptions options);
  static Result<std::unique_ptr<Model>> load(std::unique_ptr<gguf::File> file) { return load(std::move(file), {}); }

  const ModelConfig& config() const { return config_; }
  const gguf::File& file() const { return *file_; }
  const ModelWeights& weights() const { return weights_; }

  // Logits for batch.logits_idx, row-major [num_logits, vocab_size]. Errors (nothing is
  // computed) for token ids outside the vocabulary or slots outside the pool.
  Status forward(const ForwardBatch& batch, KvPool& kv, ThreadPool& pool, std::vector<float>& logits);

 private:
  Model() = default;
  Status validate(const ForwardBatch& batch, const KvPool& kv) const;
  void rope_table(const ForwardBatch& batch);
  void attention_block(int32_t layer, const ForwardBatch& batch, KvPool& kv, ThreadPool& pool);
  void ffn_block(int32_t layer, int64_t num_tokens, ThreadPool& pool);

  std::unique_ptr<gguf::File> file_;
  ModelConfig config_;
  ModelWeights weights_;
  std::vector<double> inv_freq_;  // [rope_dim / 2]

  // Scratch, reused between calls.
  std::vector<float> x_, xn_, q_, k_, v_, att_, proj_, gate_, up_;
  std::vector<float> cos_sin_;  // [num_tokens, rope_dim]
};

}  // namespace sluice
