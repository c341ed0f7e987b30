// Proposers of draft tokens for speculative decoding, behind one interface (DESIGN.md: the
// scheduler sees "k draft tokens + 1" as more tokens; the runner verifies them in its ordinary
// batched step; see runner.cc for the acceptance rule).
//
// A proposer is asked once per step for the drafts of every sequence that will decode in it, in
// one call, so a proposer with a model of its own can batch its forward passes across sequences.
// It may keep state per sequence (add_sequence/remove_sequence), e.g. a request's prediction.
//
// Thread-safety: owned by the engine thread.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"

namespace sluice::spec {

struct DraftQuery {
  SeqId seq_id = 0;
  std::span<const int32_t> tokens;  // prompt + outputs so far
  int32_t num_prompt = 0;
  int32_t max_tokens = 0;           // at most this many drafts, >= 1
  // The sampler that will verify the drafts (its penalties and its next draws); null: none.
  const Sampler* sampler = nullptr;
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  // The label of its metrics: "ngram", "prediction", "draft_model".
  virtual std::string_view name() const = 0;
  // True when drafting costs forward passes (a draft model): the engine then decides how many
  // drafts each sequence gets before asking, and max_tokens is that number.
  virtual bool costly() const { return false; }
  // Forward passes the last propose() ran (a costly proposer's; 0 otherwise).
  virtual int32_t last_passes() const { return 0; }
  virtual void add_sequence(SeqId /*seq_id*/, const Request& /*request*/) {}
  virtual void remove_sequence(SeqId /*seq_id*/) {}
  // out[i]: the drafts to follow queries[i].tokens (possibly none). out.size() == queries.size().
  virtual void propose(std::span<const DraftQuery> queries, std::vector<std::vector<int32_t>>& out) = 0;
};

}  // namespace sluice::spec
