// Adaptive draft length: how many of its drafts each speculating sequence verifies this step.
//
// Model. A sequence whose drafts are accepted independently with probability a emits, with k
// drafts, E(k) = 1 + a + ... + a^k tokens in the step (Leviathan et al. 2023, eq. 1). A step of
// n tokens takes t(n). With base tokens N0 (decodes, prompt chunks) and drafts k_s, the step
// emits sum_s E_s(k_s) + (other decodes) tokens in t(N0 + sum k_s). The policy maximizes that
// rate: it adds draft positions greedily in order of their gain a_s^(k_s + 1) (each sequence's
// gains fall with k, so this order is the best prefix for each total) and keeps the total with the
// highest estimated tokens per second, k = 0 everywhere included. When a step is memory-bound,
// t barely grows with n and drafts are nearly free: k grows with the acceptance. When it is
// compute-bound (large batches), t grows in proportion to n, a draft pays only if it is
// accepted more often than the average token is emitted, which no draft with a < 1 beats:
// speculation stops by itself (the throughput cliff of speculation at large batch sizes).
//
// Estimates. a per sequence: accepted / (accepted + rejections) over its verifying steps (each
// step ends in at most one rejection), with exponential decay, starting from the proposer's
// figure over all sequences. t(n): an exponential moving average of measured times of decode
// steps (every token with its logits: decodes and verification, whose output-matrix and
// sampling costs grow with n, unlike a prompt chunk's) per token count (exact up to 128 tokens,
// 8 buckets an octave above); between measured counts, linear interpolation; above the largest,
// up to twice it, the largest's time (optimistic, so that longer drafts get tried and measured,
// a doubling at a time), and in proportion to n beyond; below the smallest, in proportion to n
// (pessimistic, so that the step without drafts gets measured).
// And when the step without drafts has not been measured in the last kFreshSteps decode steps,
// none are chosen in the next step of decodes only, to measure it: otherwise a policy that always drafts would compare
// with a stale or extrapolated baseline for ever. A draft model's passes are measured the same way, by the sequences in them, and
// their time is added: depth j costs one pass over the sequences drafting j or more.
//
// Outcomes. The estimates can be wrong (step times measured on a noisy, shared machine: a slow
// t(16) beside a quick t(32) makes drafts look cheap), so what the policy chose is checked
// against what happened: per batch size (the decoding sequences, bucketed as token counts),
// the realized tokens per second of decode-only steps with drafts and of those without
// (moving averages, drafting time included). Where steps without drafts have done better,
// drafting is vetoed (allow_drafts()), but for an exploration step every kExploreFirst vetoed
// ones, the interval doubling up to kExploreMax while the veto holds: losses from trying are
// bounded by about 1/kExploreMax of a step's worth, and a workload that turns favourable is
// found again.
//
// Thread-safety: owned by the engine thread.
#pragma once

#include <map>
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/scheduler.h"

namespace sluice::spec {

class DraftLength {
 public:
  struct Candidate {
    SeqId seq_id = 0;
    std::string_view proposer;
    int32_t max_k = 0;    // drafts on offer (or, for a costly proposer, allowed)
    bool costly = false;  // each draft position costs a draft model pass (shared by all at that depth)
  };

  // A step of `num_tokens` tokens, `num_logits` of them with logits, took `seconds` (kept only
  // for decode steps, num_logits == num_tokens, and positive times).
  void observe_step(int32_t num_tokens, int32_t num_logits, double seconds);
  // A draft model pass over `num_seqs` sequences took `seconds`.
  void observe_draft_pass(int32_t num_seqs, double seconds);
  // A verifying step of seq_id: k drafts, `accepted` of them accepted.
  void observe_verify(SeqId seq_id, std::string_view proposer, int32_t k, int32_t accepted);
  void remove_sequence(SeqId seq_id) { seqs_.erase(seq_id); }

  // The drafts each candidate verifies (<= max_k), given the step's decode tokens without
  // drafts (one per decoding sequence). `pure_decode`: the step will hold decodes only, so a
  // step without drafts would measure the baseline (a stale one is then refreshed); in a mixed
  // step the estimates are used as they are.
  std::vector<int32_t> choose(int32_t num_decodes, std::span<const Candidate> candidates,
                              bool pure_decode = true) const;

  // A decode-only step (every token with logits) with `num_seqs` sequences, `num_drafts` of its
  // tokens drafts (0: a step without speculation), emitted `num_emitted` tokens in `seconds`
  // (its drafting included).
  void observe_outcome(int32_t num_seqs, int32_t num_drafts, int32_t num_emitted, double seconds);
  // Whether drafts chosen for a decode-only step of `num_seqs` sequences may run (see
  // Outcomes above). Counts the vetoed steps toward the next exploration.
  bool allow_drafts(int32_t num_seqs);

  // Estimates, exposed for tests and metrics.
  double step_seconds(int64_t num_tokens) const;
  double acceptance(SeqId seq_id, std::string_view proposer) const;

 private:
  struct Rate {  // decayed counts
    double accepted = 0;
    double rejected = 0;
  };
  static constexpr double kDecay = 0.9;       // per observation, for a sequence's rate
  static constexpr double kStepWeight = 0.2;  // of a new step time in its bucket's average
  static constexpr int64_t kFreshSteps = 32;
  // The token count a step of n tokens is recorded under.
  static int64_t bucket(int64_t n);
  struct Timing {
    double seconds = 0;  // average
    int64_t at = 0;      // observation count when last updated
  };
  using Table = std::map<int64_t, Timing>;     // bucket -> timing
  void observe(Table& table, int64_t n, double seconds);
  static double estimate(const Table& table, int64_t n);
  struct Outcome {
    double with_drafts = 0, without = 0;  // tokens per second, moving averages
    int32_t num_with = 0, num_without = 0;
    int32_t vetoed = 0;                    // since the last exploration
    int32_t explore_every = kExploreFirst;
  };
  static constexpr double kOutcomeWeight = 0.2;
  static constexpr int32_t kMinOutcomes = 3;  // of each kind before a veto
  static constexpr int32_t kExploreFirst = 16;
  static constexpr int32_t kExploreMax = 128;
  std::map<int64_t, Outcome> outcomes_;  // by bucket(num_seqs)
  Table step_seconds_;
  Table draft_seconds_;  // the same for draft model passes, by sequences
  int64_t num_observed_ = 0;
  std::unordered_map<SeqId, Rate> seqs_;
  std::unordered_map<std::string, Rate> proposers_;
};

}  // namespace sluice::spec
