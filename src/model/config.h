// ModelConfig: the hyper-parameters of a transformer read from GGUF metadata.
//
// Supported architectures: llama (Llama 2/3.x, TinyLlama, Mistral, SmolLM), qwen2 (q/k/v bias)
// and qwen3 (per-head q/k RMSNorm). Keys follow the GGUF convention `{arch}.block_count`, ...
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "gguf/gguf_reader.h"

namespace sluice {

enum class Arch { kLlama, kQwen2, kQwen3 };

struct ModelConfig {
  Arch arch = Arch::kLlama;
  std::string arch_name;
  std::string name;  // general.name, if any
  int32_t num_layers = 0;
  int32_t dim = 0;          // embedding length
  int32_t ffn_dim = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t vocab_size = 0;
  int32_t context_length = 0;
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  int32_t rope_dim = 0;        // rotated dimensions of each head (<= head_dim)
  bool rope_neox = false;      // rotate (i, i + d/2) instead of (2i, 2i + 1)
  float rope_linear_scale = 1.0f;  // positions are divided by this ("linear" scaling)
  bool has_rope_freq_factors = false;  // rope_freqs.weight (Llama 3 scaling) present
  bool tied_embeddings = false;

  int32_t q_dim() const { return num_heads * head_dim; }
  int32_t kv_dim() const { return num_kv_heads * head_dim; }

  static Result<ModelConfig> from_gguf(const gguf::File& file);
};

std::string_view arch_name(Arch arch);

}  // namespace sluice
