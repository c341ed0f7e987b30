// What a caller hands the engine (Request) and what it reads back (StreamOutput).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/sampler.h"

namespace sluice {

// The shape of the output: free text, or a JSON object (OpenAI's response_format json_object:
// only tokens that keep the output a prefix of a JSON object are sampled, and the output ends,
// with kStop, when the object closes; json_constraint.h).
enum class ResponseFormat { kText, kJsonObject };

struct Request {
  std::vector<int32_t> prompt_tokens;
  SamplingParams sampling;               // sampling.seed is ignored: see `seed`
  std::optional<uint64_t> seed;          // none: a fresh seed per request (not reproducible)
  int32_t max_tokens = 128;              // clamped to what the context and the KV pool allow
  std::vector<int32_t> stop_token_ids;   // in addition to the vocabulary's end-of-generation tokens
  std::vector<std::string> stop_strings; // not part of the output text (unless include_stop_str_in_output)
  bool include_stop_str_in_output = false;  // the matched stop string (or stop_token_ids token) ends the text
  // The first min_tokens outputs can be neither an end-of-generation token (unless ignore_eos)
  // nor one of stop_token_ids (the sampler gives them probability 0), and stop strings are
  // matched only in text after them, as vLLM's min_tokens.
  int32_t min_tokens = 0;
  bool ignore_eos = false;
  bool logprobs = false;                 // report each token's logprob (and sampling.top_logprobs)
  // Report the logprob of every prompt token after the first (and sampling.top_logprobs
  // alternatives): the model's distribution at temperature 1 without penalties, the numbers
  // generation reports for the same tokens. The prompt is then computed in full (its prefix is
  // not taken from the cache, whose blocks have no logits), and max_tokens may be 0: the
  // request ends with kLength once the prompt is scored (OpenAI's echo + logprobs +
  // max_tokens 0, how likelihood evaluations score a text).
  bool prompt_logprobs = false;
  int32_t priority = 0;                  // lower values are served first (as vLLM)
  std::string session;                   // optional session key (routing, metrics)
  // Speculative decoding (engine/spec/): the tokens the client expects the output to be
  // (OpenAI's predicted outputs), drafted whatever the engine's --spec; `speculative = false`
  // turns every proposer off for this request. Neither changes the output, only its speed.
  std::vector<int32_t> prediction_tokens;
  bool speculative = true;
  ResponseFormat response_format = ResponseFormat::kText;
};

enum class FinishReason { kStop, kLength, kCancelled, kError };
std::string_view finish_reason_name(FinishReason r);

struct TokenOutput {
  int32_t token_id = 0;
  float logprob = 0;               // when Request::logprobs
  std::vector<TokenLogprob> top;   // when Request::logprobs and sampling.top_logprobs > 0
};

// Per-request figures, in seconds, final with the last output.
struct RequestMetrics {
  int32_t num_prompt_tokens = 0;
  int32_t num_output_tokens = 0;
  int32_t cached_tokens = 0;       // prompt tokens whose KV came from the prefix cache
  double queue_seconds = 0;        // submit -> first scheduled
  double ttft_seconds = 0;         // submit -> first token
  double tpot_seconds = 0;         // mean time per output token after the first
  double e2e_seconds = 0;          // submit -> finished
  int32_t num_preemptions = 0;
  bool coalesced = false;          // served by an identical request's computation
  int32_t num_draft_tokens = 0;    // speculative drafts verified for this request
  int32_t num_accepted_tokens = 0; // of those, accepted
};

// Output since the previous read. Token and text deltas need not line up: text is held back
// until it is valid UTF-8 and cannot be the start of a stop string.
struct StreamOutput {
  // With Request::prompt_logprobs: prompt tokens 1..n-1 in order (the first has no context),
  // all of them before the first output token.
  std::vector<TokenOutput> prompt_logprobs;
  std::vector<TokenOutput> tokens;
  std::string text;
  bool finished = false;
  FinishReason finish_reason = FinishReason::kLength;
  std::string stop_matched;        // the stop string that ended the output, if any
  std::string error;               // when finish_reason == kError or kCancelled by shutdown
  RequestMetrics metrics;          // when finished
};

}  // namespace sluice
