// Engine flags shared by the commands that run the engine (generate; serve later), in the
// vocabulary of vLLM where the meaning is the same.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "common/status.h"
#include "engine/engine.h"
#include "model/loader.h"

namespace sluice::cli {

struct EngineOptions {
  int32_t max_num_seqs = 32;
  int32_t max_batch_tokens = 512;
  int32_t max_queued_requests = 256;
  int32_t block_size = 16;
  std::string kv_cache_memory = "auto";
  std::string kv_cache_dtype = "f16";
  bool no_coalesce = false;
  bool no_prefix_cache = false;
  std::string kv_eviction = "lru";
  std::vector<std::string> pin_prefixes;
  std::string spec;  // "": off, or draft with a --draft-model
  int32_t spec_tokens = 4;
  int32_t spec_ngram_min = 2;
  int32_t spec_ngram_max = 4;
  std::string spec_adaptive = "on";
  std::string draft_model;
  std::string draft_kv_cache_memory = "auto";
  // Whether the flags were given (a value equal to the default too): a proposer that is off
  // refuses its settings rather than ignore them.
  bool ngram_given = false, draft_kv_given = false;

  void add_to(CLI::App& cmd);
  // Resolves sizes against the model and this machine's available memory; tokenizes the
  // pinned prefixes as prompts are (with the BOS token the vocabulary asks for).
  Result<EngineConfig> to_config(const ModelConfig& model, const Tokenizer& tokenizer) const;
  // With --draft-model: loads it into `draft` (which must outlive the engine) and points
  // config.spec at it, its KV cache sized by --draft-kv-cache-memory. The target's file itself
  // (or a copy) is refused, and a draft no smaller than `target_path`'s file is warned of: a
  // draft step as costly as a target step can only slow decoding.
  Status attach_draft(EngineConfig& config, LoadedModel& draft, const std::string& target_path) const;
};

// "123", "512MiB", "2G", "1.5GB" (K/M/G/T: powers of 1024 with or without "iB", powers of
// 1000 with "B") -> bytes; "0.4" (a number below or equal to 1 with a decimal point) -> that
// fraction of the available memory. Errors name `flag` and the accepted forms.
Result<int64_t> parse_memory_size(const std::string& text, int64_t available_bytes,
                                  std::string_view flag = "--kv-cache-memory");


// One line for stderr: "KV cache: 3.0 GiB f16, 12288 blocks of 16 = 196608 tokens (12288 bytes per token)".
std::string describe_kv_cache(const Engine& engine, const ModelConfig& model);
// One line on speculative decoding: the method, the draft model's KV cache, the draft length.
std::string describe_spec(const Engine& engine, const std::string& draft_path);
// The kernel paths, and the memory the weights repacked at load take (kernels/packed_weight.h).
std::string describe_kernels(const Model& model);

}  // namespace sluice::cli
