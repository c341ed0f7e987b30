// sluice pair: which draft suits a target, measured on the user's own prompts (DESIGN.md:
// draft-target pairing). Uses the engine's models in process, because it needs both models'
// distributions.
//
// For each candidate (a draft model, or prompt lookup):
//   1. vocabulary compatibility (spec::check_draft_vocabulary), with the reason for a refusal;
//   2. acceptance from distributions rather than sampled: along the target's own output for
//      each prompt (teacher-forced, both models), at each position the acceptance a_i of the
//      candidate's draft token. Greedy: whether the argmaxes agree. At a temperature T: two
//      figures, sum_x min(p, q) (the acceptance of Leviathan et al.'s rule with the draft's full
//      distribution) and the chance that the target's next uniform draw picks the same token
//      from p and from q (sluice's rule: the draft model drafts with the target's own draws and
//      outputs stay bit-identical, draft_model_proposer.h); the ranking and the predictions use
//      sluice's. Prompt lookup's token x: p(x).
//      The chance that the first j drafts of a step are all accepted, A_j, is the mean over
//      start positions s of a_s x ... x a_(s+j-1): measured along the output, not assumed
//      independent;
//   3. step costs measured on this machine at each batch size b: the target verifying k + 1
//      tokens per sequence, t(b, k + 1), and a draft model step, d(b) (prompt lookup: 0);
//   4. the predicted speedup at each b with the best k: tokens per step E_k = 1 + A_1 + ... +
//      A_k (Leviathan et al.'s (1 - a^(k+1)) / (1 - a) when the a_i are equal), so
//      speedup = E_k t(b, 1) / (t(b, k + 1) + k d(b));
//   5. a confirmation run end to end (the engine, with and without speculation: tokens/s, and
//      whether the outputs are identical, as they must be).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/thread_pool.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace sluice::pair {

struct PairOptions {
  float temperature = 0;                   // the temperature the user serves at
  int32_t max_tokens = 64;                 // of the target's output per prompt
  int32_t max_k = 8;                       // drafts per step considered
  std::vector<int32_t> batch_sizes{1, 4, 16};
  uint64_t seed = 1;                       // of the target's sampled outputs (temperature > 0)
};

struct Candidate {
  std::string name;                        // the file, or "ngram"
  Model* model = nullptr;                  // null: prompt lookup
  const Tokenizer* tokenizer = nullptr;
  int32_t ngram_min = 2, ngram_max = 4;

  // Results.
  std::string refused;                     // non-empty: why it cannot draft for the target
  int64_t positions = 0;                   // positions measured
  double acceptance = 0;                   // mean a_i, sluice's rule
  double acceptance_min_pq = 0;            // mean sum min(p, q) (greedy: = acceptance)
  std::vector<double> accepted_at;         // [max_k]: A_1 .. A_max_k
  std::vector<double> draft_step_seconds;  // [batch sizes] d(b)
  std::vector<int32_t> best_k;             // [batch sizes]
  std::vector<double> speedup;             // [batch sizes] predicted, at best_k
  // Confirmation (when run): tokens/s with and without speculation, at batch 1.
  std::optional<double> confirmed_on, confirmed_off;
  std::optional<bool> outputs_identical;
};

struct TargetCosts {
  // [batch sizes][k + 1 - 1]: seconds of a target step verifying k + 1 tokens per sequence.
  std::vector<std::vector<double>> step_seconds;
};

// The target's outputs for the prompts (the engine, greedy or seeded at the temperature).
Result<std::vector<std::vector<int32_t>>> target_outputs(Model& target, const Tokenizer& tokenizer, ThreadPool& pool,
                                                         const std::vector<std::vector<int32_t>>& prompts,
                                                         const PairOptions& options);

// Steps 1 and 2 for one candidate, along the outputs (prompts[i] followed by outputs[i]).
void measure_acceptance(Model& target, const Tokenizer& target_tokenizer, ThreadPool& pool,
                        const std::vector<std::vector<int32_t>>& prompts,
                        const std::vector<std::vector<int32_t>>& outputs, const PairOptions& options, Candidate& c);

// Step 3: the target's step costs, and a candidate's draft step.
TargetCosts measure_target_costs(Model& target, ThreadPool& pool, int32_t context, const PairOptions& options);
void measure_draft_costs(ThreadPool& pool, int32_t context, const PairOptions& options, Candidate& c);

// Step 4.
void predict_speedup(const TargetCosts& costs, const PairOptions& options, Candidate& c);

// Step 5: the engine end to end over the prompts, one at a time, with speculation (the
// candidate, at its best k for batch 1, adaptive off) and without, in kConfirmRounds rounds;
// each figure is the best of its rounds. REQUIRES: a best k for batch 1 above 0 (a candidate
// predicted to save nothing has no configuration to confirm).
inline constexpr int32_t kConfirmRounds = 3;
Status confirm(Model& target, const Tokenizer& tokenizer, ThreadPool& pool,
               const std::vector<std::vector<int32_t>>& prompts, const PairOptions& options, Candidate& c);

// The chance that one draw of the sampler's exponential race (sampler.h) picks the same token
// from the distributions p and q: the acceptance of a draft with distribution q at a position
// where the target's is p.
double race_agreement(const std::vector<double>& p, const std::vector<double>& q);

// Candidates, best first: confirmed ones by their measured speedup, then the others by predicted
// speedup at the first batch size, then by acceptance; refused ones last.
void rank(std::vector<Candidate>& candidates);

}  // namespace sluice::pair
