// Comparing a candidate run with a baseline, item by item (eval/stats.h for the tests).
//
// Items are joined by their key (runner.h): an item's pass is its samples' pass fraction
// reaching the test's passFraction (1 sample: its pass), its score the mean of its samples'.
// Items in one run only are counted and listed, never compared.
//
// Metrics, each with a paired test over the joined items:
//   "pass rate"           every test item, pass/fail: McNemar's exact test
//   "score"               every test item's weighted score, when some score is not 0 or 1:
//                         paired bootstrap
//   each named assertion metric (assert.metric): the mean score of its assertions: bootstrap
//   "accuracy TASK"       a multiple-choice likelihood task: McNemar
//   "logprob TASK"        a perplexity task's mean token logprob per item: bootstrap
// p-values are Holm-corrected across the metrics of the comparison. Verdict per metric:
//   regressed     significant (adjusted p < alpha) and the candidate lower by more than max_drop
//   improved      significant and the candidate higher
//   no change     nothing differs at all (no item changed), or not significant and the
//                 minimum detectable effect is within max_drop (the suite could have seen a drop)
//   inconclusive  not significant and the suite too small to see a drop of max_drop
// A/A mode (two runs of one configuration): every item that changed is flaky, and the largest
// difference is the noise floor; items whose samples disagree within a run are flaky too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "eval/store.h"

namespace sluice::eval {

struct CompareOptions {
  double alpha = 0.05;
  double max_drop = 0.02;       // fraction (2pp = 0.02) or score units
  int32_t resamples = 10'000;
  uint64_t seed = 1;
  bool aa = false;              // both runs are one configuration: differences are noise
};

struct ItemDiff {
  std::string key, provider, prompt, test;
  Json vars;
  std::string base_output, cand_output;
  bool base_pass = false, cand_pass = false;
  double base_score = 0, cand_score = 0;
  bool flaky = false;
  std::string base_error, cand_error;
};

struct MetricResult {
  std::string name;
  std::string test;             // "mcnemar" or "bootstrap"
  int64_t n = 0;                // items joined
  double base = 0, cand = 0, diff = 0;
  double p = 1, p_adjusted = 1;
  double ci_lo = 0, ci_hi = 0;  // bootstrap interval of the difference (McNemar: the observed)
  double mde = 0;
  int64_t pass_to_fail = 0, fail_to_pass = 0;
  std::string verdict;          // regressed, improved, no change, inconclusive
};

struct Comparison {
  int64_t base_run = 0, cand_run = 0;
  std::vector<ItemDiff> items;  // every joined item; pass->fail first, then fail->pass, then the rest
  std::vector<MetricResult> metrics;
  int64_t only_base = 0, only_cand = 0;
  int64_t num_flaky = 0;
  double noise_floor = 0;       // A/A: the largest |diff| over metrics
  // regressed if any metric regressed; else improved; else inconclusive; else no change;
  // "nothing compared" when no item is in both runs.
  std::string verdict;
  bool aa = false;
};

// Whether an item passes: none of its samples without an answer, and the share that passed
// reaching its passFraction (within rounding: 0.28 x 25 is 7).
bool item_passes(int64_t passed, int64_t samples, double pass_fraction, bool any_error);

Comparison compare_runs(int64_t base_run, const std::vector<ResultRow>& base, int64_t cand_run,
                        const std::vector<ResultRow>& cand, const CompareOptions& options);

}  // namespace sluice::eval
