// Calls an OpenAI-compatible endpoint for eval: builds the request body from a provider and a
// rendered prompt, sends it with retries, and reads back what the assertions look at.
//
// Retries: a transport failure (refused, reset, timeout) and a 429 or 5xx answer are retried
// up to `max_retries` times, waiting a random time up to backoff * 2^attempt (capped at 30 s:
// "full jitter"); any other 4xx is the request's own fault and is not retried. Each attempt has
// its own timeout.
//
// Errors are Statuses: kUnavailable when the endpoint could not be reached or kept failing (an
// infrastructure error: `sluice eval` exits 3, it is not a regression), kInvalid when it refused
// the request (a 4xx other than 429), kError for an answer that is not an OpenAI response.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "eval/suite.h"

namespace sluice::eval {

struct CallOptions {
  std::chrono::milliseconds timeout{120'000};   // per attempt
  int32_t max_retries = 4;
  std::chrono::milliseconds backoff{500};       // before the first retry; doubles each time
  // Whether a failed connection or a timeout is retried too (429 and 5xx always are): not by
  // the probe before a run, which must say at once that an endpoint is down or hung.
  bool retry_transport = true;
};

// A completion as eval reads it.
struct Reply {
  Json body;                          // the response as received
  std::string text;                   // choices[0].text or .message.content
  std::string finish_reason;
  std::string system_fingerprint;
  double latency_ms = 0;              // the successful attempt's
  int64_t prompt_tokens = -1;         // usage, when reported
  int64_t completion_tokens = -1;
  int32_t attempts = 1;
  // logprobs, when returned: per token (legacy completions arrays, or chat content), with the
  // byte offset of each token in the returned text (legacy text_offset, which servers give in
  // bytes or in code points: turned into bytes; chat: summed bytes).
  std::vector<std::string> tokens;
  std::vector<std::optional<double>> token_logprobs;  // null for an echoed first prompt token
  std::vector<int64_t> text_offsets;
};

// The request body for `provider` with the prompt rendered: `text` for a completion provider
// (or one user message for chat), `messages` (when not null) for chat. `params` are merged
// over the provider's (request fields); `seed` replaces any seed when set.
Result<Json> build_body(const Provider& provider, const std::string& text, const Json& messages, const Json& params,
                        std::optional<int64_t> seed);

// POSTs `body` to the provider's endpoint (chat/completions or completions).
Result<Reply> call(const Provider& provider, const Json& body, const CallOptions& options);

// Parses a response body (exposed for tests).
Result<Reply> parse_reply(const Json& body, const std::string& api);

}  // namespace sluice::eval
