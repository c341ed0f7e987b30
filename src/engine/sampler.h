// Sampler: turns one step's logits into a token, for one request.
//
// Pipeline, in this fixed order (the order of HF transformers' warpers and vLLM):
//   1. penalties on the raw logits z, giving the penalized logits z':
//      repetition (HF/llama.cpp: z>0 ? z/r : z*r) for every distinct token of the whole context
//      (prompt + accepted output, no window), then presence (-p once if the token was
//      generated) and frequency (-f * count in the generated output; prompt not counted);
//      then the tokens a constraint does not allow now (JSON mode, json_constraint.h) and
//      those suppressed (min_tokens) get -inf;
//   2. temperature: z'/T (T == 0 means greedy: argmax of z', ties -> lowest id);
//   3. top-k (k highest, ties -> lowest id), then top-p (the minimal prefix, in the candidate
//      order below, whose renormalised mass reaches top_p), then min-p (keep p >= min_p*p_max);
//   4. one 64-bit draw k from the request's generator; the surviving candidates run an
//      exponential race keyed by k: token x takes -log(U_x) / p_x, U_x uniform in (0, 1) from a
//      SplitMix64 stream of key k at position x (a counter-based hash), and the least wins, ties
//      by id (sampler.cc: race_over()). This draws x with probability p_x / sum p, as an inverse CDF
//      would, but lets another distribution q with the same k pick the same token whenever q is
//      close to p, however the two rank their tokens: a draft model drafts with a copy of this
//      sampler, and its drafts agree with what the target then samples (Daliri et al. 2025,
//      "Coupling without communication and drafter-invariant speculative decoding").
//      Probabilities are p = exp((z' - max z') / T) in float (unnormalised, the top one is 1;
//      underflow to 0 means never drawn). No sort (see sampler.cc).
//
// Reported log-probs (SampleResult::logprob and ::top) are log_softmax of the penalized
// logits z' at temperature 1 over the whole vocabulary, before top-k/top-p/min-p: the model's
// distribution as the OpenAI API reports it, independent of the sampling knobs.
//
// Invariants: sample() never modifies the caller's logits and is a pure function of
// (params, prompt, accepted tokens, number of non-greedy draws so far, logits): same seed and
// same sequence of calls give the same tokens on every run and standard library (the
// generator is specified here and no std distribution is used). NaN logits count as -inf;
// +inf logits share all the mass equally. If no logit is usable (all NaN/-inf) the step is a
// uniform distribution over the vocabulary, less the tokens suppressed (suppress_until): the
// lowest such id, logprob -log(their number).
// Every sample() with temperature > 0 consumes exactly one draw; greedy consumes none.
//
// Cost: greedy is two O(vocab) passes (three with top_logprobs) with no allocation beyond
// small vectors; temperature sampling adds an expected O(vocab) selection and never sorts
// more than the top_k survivors.
//
// Thread-safety: a Sampler belongs to one request and is not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "engine/json_constraint.h"

namespace sluice {

struct SamplingParams {
  float temperature = 0.0f;          // [0, 2]; 0 => greedy
  int32_t top_k = 0;                 // >= 0; 0 => off
  float top_p = 1.0f;                // (0, 1]; 1 => off
  float min_p = 0.0f;                // [0, 1]; 0 => off
  float repetition_penalty = 1.0f;   // finite, > 0; 1 => off
  float presence_penalty = 0.0f;     // [-2, 2]; 0 => off
  float frequency_penalty = 0.0f;    // [-2, 2]; 0 => off
  uint64_t seed = 0;
  int32_t top_logprobs = 0;          // [0, 20]

  // Ok, or an error naming the first field out of range, e.g.
  // "temperature must be in [0, 2], got -1".
  Status validate() const;
};

struct TokenLogprob {
  int32_t token_id;
  float logprob;
};

struct SampleResult {
  int32_t token_id;
  float logprob;                  // log_softmax(penalized logits) of token_id, temperature 1
  std::vector<TokenLogprob> top;  // min(top_logprobs, tokens with p > 0) entries, logprob
                                  // descending, ties by id
  bool nan_logits = false;        // the model's logits held NaN (counted as -inf): a broken model
};

// Scores given tokens rather than sampling them (prompt logprobs): score() is the
// log-probability of `token_id` under `logits` (log_softmax at temperature 1, no penalties) and
// the `top_logprobs` most likely tokens, exactly what a Sampler without penalties reports for a
// token it sampled, bit for bit (the same functions compute both). NaN logits count as -inf; if
// none is usable, the distribution is uniform. One scorer per thread (it keeps scratch).
class TokenScorer {
 public:
  // REQUIRES: !logits.empty(), top_logprobs in [0, 20].
  SampleResult score(std::span<const float> logits, int32_t token_id, int32_t top_logprobs);

 private:
  std::vector<float> z_, p_;
};

// xoshiro256** (Blackman & Vigna), its state filled by four successive splitmix64 outputs
// of the seed. next_double() = (next() >> 11) * 2^-53, uniform in [0, 1).
class Xoshiro256 {
 public:
  explicit Xoshiro256(uint64_t seed);
  uint64_t next();
  double next_double();

  static uint64_t splitmix64(uint64_t& state);

 private:
  uint64_t s_[4];
};

class Sampler {
 public:
  // REQUIRES: params.validate() is ok (callers validate user input first).
  Sampler(const SamplingParams& params, std::span<const int32_t> prompt_tokens);

  // Picks the next token from logits [vocab]. Does not record it: call accept().
  // REQUIRES: !logits.empty().
  SampleResult sample(std::span<const float> logits);

  // The token sample() would pick from these logits, consuming the same draw, without its
  // log-probs: a draft model drafts with a copy of the target's sampler (spec/draft_model_proposer.h).
  // REQUIRES: !logits.empty().
  int32_t pick(std::span<const float> logits);

  // Records a generated token for the penalties. Not automatic in sample(), so a
  // speculative step can reject tokens. Ids outside [0, vocab) are recorded but never match.
  void accept(int32_t token_id);

  // Until `num_outputs` tokens have been accepted, `token_ids` get logit -inf (after the
  // penalties): they cannot be drawn and their reported logprob is -inf. For min_tokens.
  void suppress_until(std::vector<int32_t> token_ids, int32_t num_outputs);

  // From now on only tokens `constraint` allows can be drawn (their reported logprobs are
  // those of the constrained distribution: the others are -inf); accept() advances it.
  void constrain(JsonConstraint constraint) { constraint_ = std::move(constraint); }
  const JsonConstraint* constraint() const { return constraint_ ? &*constraint_ : nullptr; }

  const SamplingParams& params() const { return params_; }

  // A candidate of the temperature path: p = exp((z' - max z') / T) in (0, 1], unnormalised.
  struct Candidate {
    int32_t token_id;
    float p;
  };
  // Penalized logit of one context token; sorted by id.
  struct Override {
    int32_t token_id;
    float logit;
  };

 private:
  bool penalties_active() const;
  void build_overrides(std::span<const float> logits);
  // Writes the penalized logits into z_ and returns their maximum.
  float penalize(std::span<const float> logits);
  int32_t sample_candidates(float max_logit);

  SamplingParams params_;
  Xoshiro256 rng_;
  std::vector<int32_t> context_ids_;  // distinct ids of prompt (if repetition on) + output, sorted
  std::unordered_map<int32_t, int32_t> output_counts_;  // generated token -> count
  int32_t num_accepted_ = 0;
  std::vector<int32_t> suppressed_;   // sorted, unique
  std::optional<JsonConstraint> constraint_;
  int32_t suppress_until_ = 0;
  std::vector<Override> merged_;      // scratch: overrides_ with the suppressed tokens
  // Scratch reused across steps (allocated once per request).
  std::vector<Override> overrides_;     // [distinct context tokens in range]
  std::vector<Candidate> candidates_;   // [tokens with p > 0]
  std::vector<float> z_;                // [vocab] penalized logits
  bool nan_logits_ = false;             // the last logits penalize() read held NaN
  std::vector<float> p_;                // [vocab] exp((z_ - max) / T)
};

}  // namespace sluice
