#include "model/config.h"

namespace sluice {
namespace {

Result<int32_t> positive_int(const gguf::File& f, const std::string& key, int64_t max) {
  SLUICE_ASSIGN_OR_RETURN(int64_t v, f.get_int(key));
  if (v <= 0 || v > max) return Error("metadata '{}' is {}, out of range (1..{})", key, v, max);
  return static_cast<int32_t>(v);
}

Result<int32_t> positive_int_or(const gguf::File& f, const std::string& key, int64_t fallback, int64_t max) {
  if (!f.find(key)) return static_cast<int32_t>(fallback);
  return positive_int(f, key, max);
}

}  // namespace

std::string_view arch_name(Arch arch) {
  switch (arch) {
    case Arch::kLlama: return "llama";
    case Arch::kQwen2: return "qwen2";
    case Arch::kQwen3: return "qwen3";
  }
  return "?";
}

Result<ModelConfig> ModelConfig::from_gguf(const gguf::File& f) {
  ModelConfig c;
  SLUICE_ASSIGN_OR_RETURN(std::string_view arch, f.get_string("general.architecture"));
  c.arch_name = std::string(arch);
  if (arch == "llama") c.arch = Arch::kLlama;
  else if (arch == "qwen2") c.arch = Arch::kQwen2;
  else if (arch == "qwen3") c.arch = Arch::kQwen3;
  else return Error("unsupported architecture '{}' (supported: llama, qwen2, qwen3)", arch);
  c.name = f.get_string_or("general.name", "");
  const std::string p = c.arch_name + ".";

  SLUICE_ASSIGN_OR_RETURN(c.num_layers, positive_int(f, p + "block_count", 4096));
  SLUICE_ASSIGN_OR_RETURN(c.dim, positive_int(f, p + "embedding_length", 1 << 20));
  SLUICE_ASSIGN_OR_RETURN(c.ffn_dim, positive_int(f, p + "feed_forward_length", 1 << 22));
  SLUICE_ASSIGN_OR_RETURN(c.num_heads, positive_int(f, p + "attention.head_count", 4096));
  SLUICE_ASSIGN_OR_RETURN(c.num_kv_heads, positive_int_or(f, p + "attention.head_count_kv", c.num_heads, 4096));
  if (c.num_heads % c.num_kv_heads != 0) {
    return Error("attention.head_count {} is not a multiple of attention.head_count_kv {}", c.num_heads,
                 c.num_kv_heads);
  }
  if (c.dim % c.num_heads != 0 && !f.find(p + "attention.key_length")) {
    return Error("embedding_length {} is not a multiple of attention.head_count {}", c.dim, c.num_heads);
  }
  SLUICE_ASSIGN_OR_RETURN(c.head_dim, positive_int_or(f, p + "attention.key_length", c.dim / c.num_heads, 1 << 16));
  SLUICE_ASSIGN_OR_RETURN(int32_t value_dim, positive_int_or(f, p + "attention.value_length", c.head_dim, 1 << 16));
  if (value_dim != c.head_dim) {
    return Error("attention.value_length {} differs from key_length {} (not supported)", value_dim, c.head_dim);
  }
  SLUICE_ASSIGN_OR_RETURN(c.context_length, positive_int_or(f, p + "context_length", 2048, 1 << 24));
  SLUICE_ASSIGN_OR_RETURN(double eps, f.get_float_or(p + "attention.layer_norm_rms_epsilon", 1e-5));
  if (!(eps > 0 && eps < 1)) return Error("attention.layer_norm_rms_epsilon is {}, out of range (0, 1)", eps);
  c.rms_eps = static_cast<float>(eps);
  SLUICE_ASSIGN_OR_RETURN(double theta, f.get_float_or(p + "rope.freq_base", 10000.0));
  if (!(theta > 1)) return Error("rope.freq_base is {}, must be > 1", theta);
  c.rope_theta = static_cast<float>(theta);
  SLUICE_ASSIGN_OR_RETURN(c.rope_dim, positive_int_or(f, p + "rope.dimension_count", c.head_dim, c.head_dim));
  if (c.rope_dim % 2 != 0) return Error("rope.dimension_count {} is odd", c.rope_dim);
  c.rope_neox = c.arch != Arch::kLlama;

  std::string scaling = f.get_string_or(p + "rope.scaling.type", "none");
  if (scaling == "linear") {
    SLUICE_ASSIGN_OR_RETURN(double factor, f.get_float(p + "rope.scaling.factor"));
    if (!(factor >= 1)) return Error("rope.scaling.factor is {}, must be >= 1", factor);
    c.rope_linear_scale = static_cast<float>(factor);
  } else if (scaling != "none" && !scaling.empty()) {
    return Error("rope scaling type '{}' is not supported (supported: none, linear, llama3 via rope_freqs)",
                 scaling);
  }
  c.has_rope_freq_factors = f.find_tensor("rope_freqs.weight") != nullptr;

  const gguf::TensorInfo* embd = f.find_tensor("token_embd.weight");
  if (!embd) return Error("missing tensor 'token_embd.weight'");
  if (embd->dims.size() != 2 || embd->dims[0] != static_cast<uint64_t>(c.dim)) {
    return Error("tensor 'token_embd.weight' has shape {}, expected [{}, vocab]", embd->shape_string(), c.dim);
  }
  if (embd->dims[1] > (1u << 24)) return Error("vocabulary of {} tokens is too large", embd->dims[1]);
  c.vocab_size = static_cast<int32_t>(embd->dims[1]);
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  return c;
}

}  // namespace sluice
