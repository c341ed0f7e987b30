// The statistics of `sluice eval compare`: paired tests of a candidate against a baseline on
// the same items.
//
//   McNemar's exact test (pass/fail): of the n = b + c items whose outcome differs, b went
//     pass -> fail and c fail -> pass; under "no change" b ~ Binomial(n, 1/2), and the two-sided
//     p = min(1, 2 * P(X <= min(b, c))) (McNemar 1947, in its exact binomial form).
//   Paired bootstrap (scores): the mean of per-item differences, resampled with replacement
//     `resamples` times from a seeded generator (splitmix64: the same seed gives the same interval
//     on every machine); the percentile interval at `confidence`, and a two-sided p from the
//     share of resampled means on each side of 0 (Efron & Tibshirani 1993, ch. 13 and 16).
//   Holm's step-down correction across the metrics of one comparison (Holm 1979).
//   Minimum detectable effects: pass/fail, the smallest drop that could reach significance at
//     all, k/n where k is the fewest discordant items (all in one direction) with exact p <= alpha;
//     scores, (z(1 - alpha/2) + z(0.8)) * sd / sqrt(n), 80% power under a normal approximation.
//   pass@k and pass^k from n samples with c passing: 1 - C(n-c, k)/C(n, k) (Chen et al. 2021)
//     and C(c, k)/C(n, k) (all k of k pass; Yao et al. 2024, tau-bench).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace sluice::eval {

double mcnemar_exact_p(int64_t b, int64_t c);

struct BootstrapResult {
  double mean = 0;  // of the differences
  double lo = 0, hi = 0;
  double p = 1;
};
BootstrapResult paired_bootstrap(std::span<const double> diffs, int32_t resamples, double confidence, uint64_t seed);

// Holm-adjusted p-values, in the input's order.
std::vector<double> holm(std::span<const double> p);

// Fewest discordant items, all one way, that McNemar's exact test calls significant at alpha.
int64_t mcnemar_min_discordant(double alpha);
double score_mde(double sd, int64_t n, double alpha);

double pass_at_k(int64_t n, int64_t c, int64_t k);
double pass_hat_k(int64_t n, int64_t c, int64_t k);

// Inverse of the standard normal CDF (Acklam's rational approximation, |error| < 1.2e-9).
double normal_quantile(double p);

}  // namespace sluice::eval
