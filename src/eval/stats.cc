#include "eval/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace sluice::eval {
namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// log C(n, k)
double log_choose(int64_t n, int64_t k) {
  return std::lgamma(static_cast<double>(n) + 1) - std::lgamma(static_cast<double>(k) + 1) -
         std::lgamma(static_cast<double>(n - k) + 1);
}

}  // namespace

double mcnemar_exact_p(int64_t b, int64_t c) {
  const int64_t n = b + c;
  if (n == 0) return 1.0;
  const int64_t k = std::min(b, c);
  // P(X <= k), X ~ Binomial(n, 1/2): the terms C(n, i) / 2^n by their recurrence, in long
  // double (whose range holds 2^-n up to n = 16000; larger n goes through logarithms).
  if (n <= 16000) {
    long double term = std::pow(0.5L, static_cast<long double>(n)), tail = 0;
    for (int64_t i = 0; i <= k; ++i) {
      tail += term;
      term = term * static_cast<long double>(n - i) / static_cast<long double>(i + 1);
    }
    return std::min(1.0, static_cast<double>(2 * tail));
  }
  double tail = 0;
  for (int64_t i = 0; i <= k; ++i) tail += std::exp(log_choose(n, i) - static_cast<double>(n) * std::log(2.0));
  return std::min(1.0, 2.0 * tail);
}

BootstrapResult paired_bootstrap(std::span<const double> diffs, int32_t resamples, double confidence, uint64_t seed) {
  BootstrapResult r;
  const size_t n = diffs.size();
  if (n == 0) return r;
  r.mean = std::accumulate(diffs.begin(), diffs.end(), 0.0) / static_cast<double>(n);
  if (std::all_of(diffs.begin(), diffs.end(), [](double d) { return d == 0.0; })) {
    r.lo = r.hi = 0;
    r.p = 1;
    return r;
  }
  std::vector<double> means(static_cast<size_t>(resamples));
  uint64_t state = seed;
  for (double& m : means) {
    double sum = 0;
    for (size_t i = 0; i < n; ++i) sum += diffs[splitmix64(state) % n];
    m = sum / static_cast<double>(n);
  }
  std::sort(means.begin(), means.end());
  const double tail = (1.0 - confidence) / 2.0;
  auto at = [&](double q) {
    const auto i = static_cast<size_t>(std::clamp(q * static_cast<double>(resamples - 1), 0.0, static_cast<double>(resamples - 1)));
    return means[i];
  };
  r.lo = at(tail);
  r.hi = at(1.0 - tail);
  const auto below = static_cast<double>(std::count_if(means.begin(), means.end(), [](double m) { return m <= 0; }));
  const auto above = static_cast<double>(std::count_if(means.begin(), means.end(), [](double m) { return m >= 0; }));
  r.p = std::min(1.0, 2.0 * std::min(below, above) / static_cast<double>(resamples));
  return r;
}

std::vector<double> holm(std::span<const double> p) {
  const size_t m = p.size();
  std::vector<size_t> order(m);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] < p[b]; });
  std::vector<double> adj(m);
  double running = 0;
  for (size_t j = 0; j < m; ++j) {
    running = std::max(running, std::min(1.0, static_cast<double>(m - j) * p[order[j]]));
    adj[order[j]] = running;
  }
  return adj;
}

int64_t mcnemar_min_discordant(double alpha) {
  for (int64_t k = 1; k < 64; ++k) {
    if (mcnemar_exact_p(k, 0) <= alpha) return k;
  }
  return 64;
}

double normal_quantile(double p) {
  static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                             1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                             6.680131188771972e+01, -1.328068155288572e+01};
  static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                             -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00};
  static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00};
  const double lo = 0.02425, hi = 1 - lo;
  if (p < lo) {
    const double q = std::sqrt(-2 * std::log(p));
    return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  if (p > hi) {
    const double q = std::sqrt(-2 * std::log(1 - p));
    return -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  const double q = p - 0.5, r = q * q;
  return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
         (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

double score_mde(double sd, int64_t n, double alpha) {
  if (n <= 0) return INFINITY;
  return (normal_quantile(1 - alpha / 2) + normal_quantile(0.8)) * sd / std::sqrt(static_cast<double>(n));
}

double pass_at_k(int64_t n, int64_t c, int64_t k) {
  if (k > n || n <= 0) return NAN;
  if (n - c < k) return 1.0;
  return 1.0 - std::exp(log_choose(n - c, k) - log_choose(n, k));
}

double pass_hat_k(int64_t n, int64_t c, int64_t k) {
  if (k > n || n <= 0) return NAN;
  if (c < k) return 0.0;
  return std::exp(log_choose(c, k) - log_choose(n, k));
}

}  // namespace sluice::eval
