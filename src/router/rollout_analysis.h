// A rollout's analysis (rollout.h): the candidate's requests against stable's over the same
// window, by what a canary must not make worse.
//
//   errors   5xx answers, requests no replica answered, streams ended by an upstream failure
//            (not 4xx: the client's; not 429: load). Fails when the candidate's rate exceeds
//            stable's by more than max_error_rate_increase.
//   refusals 4xx answers but 429 (not counted where the request is an error already): clients'
//            mistakes reach both versions, so a candidate that refuses far more than stable (a
//            model it does not serve: 404 for everything) is the candidate's fault. Fails past
//            max_refusal_rate_increase (wider than errors': a session's mistakes, sticky, all
//            reach one version).
//   TTFT     p95, compared within bands of the prompt's cache-hit fraction (cached / prompt
//            tokens from usage: [0, 0.25), [0.25, 0.5), [0.5, 0.75), [0.75, 1], and one band for
//            answers without usage), in each band where both versions have kMinBandSamples: a
//            new version starts with a cold prefix cache, and comparing its cold requests with
//            stable's warm ones would blame the model for the cache. Fails when a band's ratio
//            exceeds max_ttft_p95_ratio.
//   TPOT     p95 of (end - first token) / (completion tokens - 1), streamed answers with usage.
//   quality  shadow pairs (shadow_compare.h) in the window: the share of the candidate's that
//            disagree with their primary (or got no answer) less the noise floor's share (stable
//            vs a second stable replica; 0 without noise pairs), once there are min_shadow_pairs
//            candidate pairs. Fails past max_shadow_disagreement_increase.
// No verdict until both versions have min_requests in the window.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "router/rollout.h"

namespace sluice::router {

// One finished request of a version.
struct RequestOutcome {
  bool error = false;
  bool refused = false;      // a 4xx answer other than 429
  double ttft = -1;          // seconds; < 0: unknown (an answer not streamed)
  double tpot = -1;          // seconds per output token after the first; < 0: unknown
  double hit_fraction = -1;  // cached / prompt tokens; < 0: no usage
};

// What one version did in a window (samples kept up to kMaxSamples each).
struct VersionWindow {
  static constexpr size_t kMaxSamples = 4096;
  int64_t requests = 0, errors = 0, refused = 0;
  std::vector<std::pair<int, double>> ttft;  // (cache band, seconds)
  std::vector<double> tpot;
  void add(const RequestOutcome& o);
};

// Shadow pairs compared in a window: to the candidate, and the noise floor's.
struct ShadowWindow {
  int64_t pairs = 0, disagreements = 0;
  int64_t noise_pairs = 0, noise_disagreements = 0;
};

struct AnalysisVerdict {
  bool conclusive = false;  // false: not enough requests yet, the window goes on
  bool waiting_for_shadow = false;  // not conclusive only for want of shadow pairs
  bool passed = false;
  std::string reason;       // what failed, or what was compared
  nlohmann::json metrics;   // both versions' figures
};

inline constexpr int64_t kMinBandSamples = 5;
// 0..3 by quarter of the hit fraction; 4 for unknown.
int cache_band(double hit_fraction);
// `shadow_required` (a rollout with a shadow): a verdict passes only once the shadow is judged
// (minShadowPairs pairs); a failure of another check is conclusive at once.
AnalysisVerdict analyze(const VersionWindow& stable, const VersionWindow& candidate, const AnalysisConfig& config,
                        const ShadowWindow& shadow = {}, bool shadow_required = false);

}  // namespace sluice::router
