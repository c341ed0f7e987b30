#include "router/rollout_analysis.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace sluice::router {
namespace {

constexpr const char* kBandNames[] = {"cache hit [0, 0.25)", "cache hit [0.25, 0.5)", "cache hit [0.5, 0.75)",
                                      "cache hit [0.75, 1]", "no usage reported"};

// The 95th percentile (nearest rank) of `v`; v is reordered.
double p95(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t rank = static_cast<size_t>(std::ceil(0.95 * static_cast<double>(v.size()))) - 1;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(rank), v.end());
  return v[rank];
}

std::vector<double> band_of(const VersionWindow& w, int band) {
  std::vector<double> out;
  for (const auto& [b, s] : w.ttft) {
    if (b == band) out.push_back(s);
  }
  return out;
}

}  // namespace

int cache_band(double hit_fraction) {
  if (hit_fraction < 0) return 4;
  return std::clamp(static_cast<int>(hit_fraction * 4), 0, 3);
}

void VersionWindow::add(const RequestOutcome& o) {
  ++requests;
  errors += o.error;
  refused += o.refused;
  if (o.ttft >= 0 && ttft.size() < kMaxSamples) ttft.emplace_back(cache_band(o.hit_fraction), o.ttft);
  if (o.tpot >= 0 && tpot.size() < kMaxSamples) tpot.push_back(o.tpot);
}

AnalysisVerdict analyze(const VersionWindow& stable, const VersionWindow& candidate, const AnalysisConfig& config,
                        const ShadowWindow& shadow, bool shadow_required) {
  AnalysisVerdict v;
  auto rate = [](const VersionWindow& w) { return w.requests ? static_cast<double>(w.errors) / w.requests : 0.0; };
  auto refusal_rate = [](const VersionWindow& w) {
    return w.requests ? static_cast<double>(w.refused) / w.requests : 0.0;
  };
  v.metrics = {{"stable", {{"requests", stable.requests}, {"errors", stable.errors}, {"error_rate", rate(stable)},
                           {"refused", stable.refused}, {"refusal_rate", refusal_rate(stable)}}},
               {"candidate", {{"requests", candidate.requests}, {"errors", candidate.errors},
                              {"error_rate", rate(candidate)}, {"refused", candidate.refused},
                              {"refusal_rate", refusal_rate(candidate)}}}};
  if (stable.requests < config.min_requests || candidate.requests < config.min_requests) {
    v.reason = fmt::format("{} stable and {} candidate requests; {} of each needed", stable.requests,
                           candidate.requests, config.min_requests);
    return v;
  }
  v.conclusive = true;
  std::vector<std::string> failures, compared;
  const double increase = rate(candidate) - rate(stable);
  compared.push_back(fmt::format("error rate {:.1f}% vs {:.1f}%", 100 * rate(candidate), 100 * rate(stable)));
  if (increase > config.max_error_rate_increase) {
    failures.push_back(fmt::format("error rate {:.1f}% vs stable's {:.1f}% (more than +{:.1f} points)",
                                   100 * rate(candidate), 100 * rate(stable), 100 * config.max_error_rate_increase));
  }
  compared.push_back(fmt::format("refusals (4xx) {:.1f}% vs {:.1f}%", 100 * refusal_rate(candidate),
                                 100 * refusal_rate(stable)));
  if (refusal_rate(candidate) - refusal_rate(stable) > config.max_refusal_rate_increase) {
    failures.push_back(fmt::format("refusals (4xx) {:.1f}% vs stable's {:.1f}% (more than +{:.1f} points)",
                                   100 * refusal_rate(candidate), 100 * refusal_rate(stable),
                                   100 * config.max_refusal_rate_increase));
  }
  nlohmann::json bands = nlohmann::json::array();
  for (int band = 0; band < 5; ++band) {
    const std::vector<double> s = band_of(stable, band), c = band_of(candidate, band);
    if (static_cast<int64_t>(s.size()) < kMinBandSamples || static_cast<int64_t>(c.size()) < kMinBandSamples) continue;
    const double ps = p95(s), pc = p95(c);
    const double ratio = ps > 0 ? pc / ps : (pc > 0 ? INFINITY : 1.0);
    bands.push_back({{"band", kBandNames[band]}, {"stable_p95", ps}, {"candidate_p95", pc}, {"ratio", ratio},
                     {"stable_samples", s.size()}, {"candidate_samples", c.size()}});
    compared.push_back(fmt::format("TTFT p95 ({}) {:.3f} s vs {:.3f} s", kBandNames[band], pc, ps));
    if (ratio > config.max_ttft_p95_ratio) {
      failures.push_back(fmt::format("TTFT p95 ({}) {:.3f} s vs stable's {:.3f} s ({:.2f}x, more than {:.2f}x)",
                                     kBandNames[band], pc, ps, ratio, config.max_ttft_p95_ratio));
    }
  }
  v.metrics["ttft_by_cache_band"] = bands;
  if (static_cast<int64_t>(stable.tpot.size()) >= kMinBandSamples &&
      static_cast<int64_t>(candidate.tpot.size()) >= kMinBandSamples) {
    const double ps = p95(stable.tpot), pc = p95(candidate.tpot);
    const double ratio = ps > 0 ? pc / ps : (pc > 0 ? INFINITY : 1.0);
    v.metrics["tpot"] = {{"stable_p95", ps}, {"candidate_p95", pc}, {"ratio", ratio}};
    compared.push_back(fmt::format("TPOT p95 {:.4f} s vs {:.4f} s", pc, ps));
    if (ratio > config.max_tpot_p95_ratio) {
      failures.push_back(fmt::format("TPOT p95 {:.4f} s vs stable's {:.4f} s ({:.2f}x, more than {:.2f}x)", pc, ps,
                                     ratio, config.max_tpot_p95_ratio));
    }
  }
  if (shadow.pairs > 0 || shadow.noise_pairs > 0) {
    auto share = [](int64_t n, int64_t of) { return of ? static_cast<double>(n) / static_cast<double>(of) : 0.0; };
    const double cand = share(shadow.disagreements, shadow.pairs);
    const double noise = share(shadow.noise_disagreements, shadow.noise_pairs);
    const bool judged = shadow.pairs >= config.min_shadow_pairs;
    v.metrics["shadow"] = {{"pairs", shadow.pairs},
                           {"disagreement", cand},
                           {"noise_pairs", shadow.noise_pairs},
                           {"noise_disagreement", noise},
                           {"judged", judged}};
    if (judged) {
      compared.push_back(fmt::format("shadow disagreement {:.1f}% vs noise floor {:.1f}%", 100 * cand, 100 * noise));
      if (cand - noise > config.max_shadow_disagreement_increase) {
        failures.push_back(fmt::format(
            "shadow disagreement {:.1f}% of {} pairs vs the noise floor's {:.1f}% (more than +{:.1f} points)",
            100 * cand, shadow.pairs, 100 * noise, 100 * config.max_shadow_disagreement_increase));
      }
    }
  }
  if (shadow_required && failures.empty() && shadow.pairs < config.min_shadow_pairs) {
    // Nothing failed, but quality is not judged yet: the window goes on.
    v.conclusive = false;
    v.waiting_for_shadow = true;
    v.reason = fmt::format("{} shadow pairs; {} needed to judge quality", shadow.pairs, config.min_shadow_pairs);
    return v;
  }
  v.passed = failures.empty();
  const std::vector<std::string>& said = v.passed ? compared : failures;
  for (size_t i = 0; i < said.size(); ++i) v.reason += fmt::format("{}{}", i ? "; " : "", said[i]);
  return v;
}

}  // namespace sluice::router
