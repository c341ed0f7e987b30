// The engine's per-request state (engine.h), shared by the files that implement the engine:
// engine.cc (requests, the loop, steps), engine_output.cc (what a step sends subscribers) and
// engine_spec.cc (speculative drafting). Internal to the engine library.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_stream.h"
#include "engine/stop_matcher.h"
#include "tokenizer/stream_decoder.h"

namespace sluice {

struct Engine::Subscriber {
  std::shared_ptr<StreamState> stream;
  double submit_time = 0;
  double first_token_time = -1;
  // Tokens that reached it at first_token_time: 1, or a coalesced follower's whole history at
  // its join. Time per output token is over the ones after those.
  int32_t num_first_tokens = 0;
  bool coalesced = false;
};

struct Engine::Computation {
  Computation(SeqId seq_id, Request r, const Tokenizer& tokenizer)
      : id(seq_id), request(std::move(r)), decoder(tokenizer),
        stops(request.stop_strings, request.include_stop_str_in_output) {}
  SeqId id;
  Request request;
  std::string coalesce_key;  // empty: not coalescable
  StreamDecoder decoder;
  StopMatcher stops;
  int32_t max_new = 0;
  int32_t num_output = 0;
  std::string stop_matched;
  std::vector<TokenOutput> history_tokens;  // for late subscribers (coalescable only)
  std::vector<TokenOutput> history_prompt;  // prompt logprobs, for late subscribers (coalescable only)
  int32_t num_prompt_scored = 0;            // prompt logprobs published (a recompute repeats them)
  std::string history_text;
  std::vector<Subscriber> subs;
  double scheduled_time = -1;
  int32_t num_preemptions = 0;
  spec::Proposer* proposer = nullptr;  // none: no speculation
  int32_t num_draft_tokens = 0;
  int32_t num_accepted_tokens = 0;
  std::optional<JsonState> json;       // JSON mode: the output so far, to end it when complete
};

}  // namespace sluice
