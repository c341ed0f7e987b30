// Random-weight models of any supported shape and weight type, for tests, benchmarks and the
// built-in demo model. A made model carries a working tokenizer: a copy of another GGUF's
// vocabulary (--vocab) or a synthesized byte-level BPE vocabulary of the preset's size.
//
// Weights are drawn from a seeded generator, so the same spec always gives the same file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "gguf/gguf_types.h"
#include "gguf/gguf_writer.h"
#include "model/config.h"

namespace sluice {

struct ModelSpec {
  std::string name = "random";
  Arch arch = Arch::kLlama;
  int32_t num_layers = 2;
  int32_t dim = 64;
  int32_t ffn_dim = 128;
  int32_t num_heads = 4;
  int32_t num_kv_heads = 2;
  int32_t head_dim = 0;  // 0: dim / num_heads
  int32_t vocab_size = 512;
  int32_t context_length = 512;
  float rope_theta = 10000.0f;
  float rms_eps = 1e-5f;
  bool tied_embeddings = false;
  bool llama3_rope = false;  // writes rope_freqs.weight (factor 32, low 1, high 4, original 8192)
  gguf::TensorType dtype = gguf::TensorType::kF32;
  uint64_t seed = 1;
  std::string vocab_file;  // copy the tokenizer of this GGUF; empty: synthesize one
  bool demo = false;       // marks the file as the built-in demo model

  Status validate() const;
};

struct Preset {
  std::string name;
  std::string description;
  ModelSpec spec;
};

const std::vector<Preset>& model_presets();
Result<ModelSpec> preset_spec(std::string_view name);

// Builds the whole model in a writer (metadata, tokenizer, tensors).
Result<gguf::Writer> make_model(const ModelSpec& spec);

// The built-in demo model ("--model demo"): a small llama-architecture model with random
// weights, made in memory. Its output is gibberish, and its metadata says so.
ModelSpec demo_model_spec();

}  // namespace sluice
