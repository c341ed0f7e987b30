// Runner: turns a ScheduleOutput into one forward pass over the batch and samples the next
// token of every sequence whose chunk reached its last known token. A sequence with draft
// tokens gets logits at its last known token and at each draft, and its drafts are verified
// (runner.cc): the accepted ones and the token sampled after them come back, in order.
//
// It owns each sequence's Sampler (penalty history and random state survive preemption: a
// recomputed sequence samples exactly what it would have). Sampling of different sequences
// runs in parallel on the thread pool; each Sampler is used by one thread at a time.
//
// Thread-safety: owned by the engine thread.
#pragma once

#include <span>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "common/thread_pool.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "model/kv_pool.h"
#include "model/model.h"

namespace sluice {

// A prompt token's logprob (ScheduledSeq::score_targets), under the model's distribution at
// temperature 1 without penalties (TokenScorer).
struct PromptScore {
  SeqId seq_id = 0;
  int32_t position = 0;                // of the scored token, >= 1
  SampleResult score;                  // token_id is the prompt token
};

struct RunnerOutput {
  std::vector<SampledToken> sampled;   // [num_sampled] in ScheduleOutput order
  std::vector<SampleResult> samples;   // [num_sampled] logprobs of each
  std::vector<PromptScore> prompt;     // in ScheduleOutput order, then position order
};

class Runner {
 public:
  Runner(Model& model, KvPool& kv, ThreadPool& pool);

  // REQUIRES: params.validate() is ok.
  // `suppressed` tokens cannot be sampled until `suppress_until` tokens were (min_tokens).
  void add_sequence(SeqId seq_id, const SamplingParams& params, std::span<const int32_t> prompt,
                    std::vector<int32_t> suppressed = {}, int32_t suppress_until = 0);
  // Only tokens `constraint` allows are sampled for the sequence from now on (JSON mode).
  void constrain(SeqId seq_id, JsonConstraint constraint);
  void remove_sequence(SeqId seq_id);
  size_t num_sequences() const { return samplers_.size(); }
  // The sampler that will pick the sequence's next tokens; null if it has none.
  const Sampler* sampler(SeqId seq_id) const;

  // Errors come from the model (nothing was computed); samplers are unchanged then.
  Result<RunnerOutput> run(const ScheduleOutput& out);

 private:
  Model& model_;
  KvPool& kv_;
  ThreadPool& pool_;
  std::unordered_map<SeqId, Sampler> samplers_;
  ForwardBatch batch_;
  std::vector<float> logits_;
};

}  // namespace sluice
