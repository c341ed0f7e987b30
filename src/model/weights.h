// ModelWeights: the tensors of a model bound by name from a GGUF file, shape-checked.
//
// Matrices stay zero-copy views into the file. Vectors (norm weights, biases) are read as
// floats; those stored as F16/BF16 are converted once into owned buffers.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "gguf/gguf_reader.h"
#include "common/thread_pool.h"
#include "kernels/matmul.h"
#include "kernels/packed_weight.h"
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
  // Matrices repacked for the 16-row kernels (kernels/packed_weight.h), pointed to by the views.
  std::vector<std::unique_ptr<kernels::PackedWeight>> packed;

  static Result<ModelWeights> bind(const gguf::File& file, const ModelConfig& config);

  // Repacks every block-quantized matrix the forward pass multiplies by (token_embd only when
  // it is also the output), so the amx, avx512, avxvnni and avx2 kernels read it in place: both
  // forms if they fit in budget bytes (tile_form false: the lean form only), else the lean form
  // alone if it fits, else nothing; repack_note says which and why.
  void repack(ThreadPool& pool, size_t budget, bool tile_form = true);
  size_t packed_bytes() const;
  std::string repack_note;
};

}  // namespace sluice
