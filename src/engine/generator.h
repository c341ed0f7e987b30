// Generator: one request at a time, from prompt tokens to streamed text, on the batched
// forward pass. The command-line `sluice generate` runs on it; the batching engine of the
// server replaces it with a scheduler over many sequences, keeping the same pieces
// (Sampler, StreamDecoder, StopMatcher) per request.
//
// Flow per step: forward -> Sampler::sample -> end-of-generation / stop-id check ->
// StreamDecoder (valid UTF-8 only) -> StopMatcher (text of a stop string is never emitted).
// The prompt is prefilled in chunks of at most prefill_chunk tokens.
//
// Not thread-safe: one generate() at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/thread_pool.h"
#include "engine/sampler.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace sluice {

struct GenerateRequest {
  std::vector<int32_t> prompt_tokens;
  SamplingParams sampling;
  int32_t max_tokens = 128;
  std::vector<int32_t> stop_token_ids;  // in addition to the vocabulary's end-of-generation tokens
  std::vector<std::string> stop_strings;
  bool ignore_eos = false;
};

enum class FinishReason { kStop, kLength };
std::string_view finish_reason_name(FinishReason r);

struct GenerateResult {
  std::vector<int32_t> output_tokens;  // sampled tokens, including a final stop token if any
  std::vector<SampleResult> samples;   // [output_tokens] chosen token and top log-probs
  std::string text;                    // emitted text (stop strings and stop tokens excluded)
  FinishReason finish_reason = FinishReason::kLength;
  std::string stop_matched;            // the stop string that ended generation, if any
  double prefill_seconds = 0;
  double decode_seconds = 0;
};

class Generator {
 public:
  Generator(Model& model, const Tokenizer& tokenizer, ThreadPool& pool, int32_t prefill_chunk = 512);

  // on_text receives text as soon as it is safe to show; may be empty.
  // Errors: an empty prompt, a prompt that fills the context, invalid sampling parameters.
  Result<GenerateResult> generate(const GenerateRequest& request,
                                  const std::function<void(std::string_view)>& on_text = {});

 private:
  Model& model_;
  const Tokenizer& tokenizer_;
  ThreadPool& pool_;
  int32_t prefill_chunk_;
};

}  // namespace sluice
