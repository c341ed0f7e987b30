// ModelWeights: the tensors of a model bound by name from a GGUF file, shape-checked.
//
// Matrices stay zero-copy views into the file. Vectors (norm weights, biases) are read as
// floats; those stored as F16/BF16 are converted once into owned buffers.
#pragma once

#include <memory>
#include <vector>

#include "common/status.h"
#include "gguf/gguf_reader.h"
#include "kernels/matmul.h"
#include "model/config.h"

namespace sluice {

struct LayerWeights {
  const float* attn_norm = nullptr;  // [dim]
  kernels::WeightView wq, wk, wv, wo;
  const float* bq = nullptr;  // [q_dim], qwen2
  const float* bk = nullptr;  // [kv_dim], qwen2
  const float* bv = nullptr;  // [kv_dim], qwen2
  const float* q_norm = nullptr;  // [head_dim], qwen3
  const float* k_norm = nullptr;  // [head_dim], qwen3
  const float* ffn_norm = nullptr;  // [dim]
  kernels::WeightView gate, up, down;
};

struct ModelWeights {
  kernels::WeightView token_embd;  // [vocab, dim]
  const float* output_norm = nullptr;
  kernels::WeightView output;  // [vocab, dim]; token_embd when tied
  std::vector<LayerWeights> layers;
  const float* rope_freq_factors = nullptr;  // [rope_dim / 2] or null
  std::vector<std::unique_ptr<std::vector<float>>> owned;  // converted vectors

  static Result<ModelWeights> bind(const gguf::File& file, const ModelConfig& config);
};

}  // namespace sluice
