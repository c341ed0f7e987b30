// Canary rollouts: a candidate version of the replicas takes a growing share of the traffic,
// step by step, and is promoted when it passes them all or rolled back at once when its analysis
// fails (the rollout vocabulary of Argo Rollouts: setWeight, pause, analysis, failureLimit).
//
// A spec (YAML through `sluice route rollout start FILE`, or JSON through POST /admin/rollouts):
//
//   name: qwen-v2
//   stable: v1                   # version labels of the replicas
//   candidate: v2
//   steps:                       # default: setWeight 1, 5, 10, 25, 50, each followed by a
//     - setWeight: 5             # pause of 60 s and 100 requests at that weight, then 100
//     - pause: {duration: 120, minRequests: 200}   # no duration: until resumed by hand
//     - analysis: {}             # wait for a passing analysis at this weight
//     - setWeight: 100
//   analysis:                    # checked every interval, candidate against stable
//     interval: 30               # seconds
//     failureLimit: 2            # failed analyses tolerated; one more aborts the rollout
//     minRequests: 20            # per version and window, else the window goes on
//     maxErrorRateIncrease: 0.02 # 5xx, failed and broken streams: candidate less stable
//     maxTtftP95Ratio: 1.5       # compared within cache-hit bands (rollout_analysis.h)
//     maxTpotP95Ratio: 1.5
//     maxShadowDisagreementIncrease: 0.05   # quality: candidate's shadow disagreement less
//     minShadowPairs: 10                    # the noise floor's (shadow.h), with this many pairs
//     evalSuite: evals/app/suite.yaml       # also at each analysis step: `sluice eval` against a
//     evalMaxDrop: 0.02                     # stable and a candidate replica; "regressed" fails
//   warm: {prefixes: 32, timeout: 30}   # before the first step (WarmConfig)
//   shadow:                      # mirror stable's traffic to the candidate (ShadowConfig)
//     fraction: 0.1              # of requests, or of sessions with `by: session`
//     noiseFraction: 0.05        # also to a second stable replica: the noise floor
//
// Assignment is sticky: a session goes to the candidate when hash(session) mod 10000 <
// weight x 100 (FNV-1a 64 of the session key, the same in every router instance and after a
// restart), so a session stays on one version while the weight only grows, and moves back to
// stable, all at once, when the rollout is aborted.
//
// Rollout is the state machine, a value: its state() is what the store keeps (rollout_store.h),
// and restore() resumes it after a restart at the same step with the same weight. Every change
// comes back as a Decision (what, why, at which step), which the store records.
//
// Thread-safety: none; the router's controller owns it under its lock.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace sluice::router {

struct RolloutStep {
  enum class Kind { kSetWeight, kPause, kAnalysis };
  Kind kind = Kind::kSetWeight;
  double weight = 0;          // kSetWeight: the candidate's share, percent in [0, 100]
  double pause_seconds = -1;  // kPause: how long; negative: until resumed by hand
  int64_t min_requests = 0;   // kPause: and at least this many requests routed at the weight
};

// The analysis, candidate against stable over the same window (rollout_analysis.h).
struct AnalysisConfig {
  double interval_seconds = 30;
  int32_t failure_limit = 2;            // failed analyses tolerated over the rollout; one more aborts it
  int64_t min_requests = 20;            // per version in a window, else no verdict yet
  double max_error_rate_increase = 0.02;  // candidate's error rate less stable's
  // Its refusals' (4xx but 429) less stable's: wider, since a session's mistakes (a chat past the
  // context, 400 every turn) all reach one version; a candidate refusing what stable serves (404
  // for a model it lacks) is far past it.
  double max_refusal_rate_increase = 0.1;
  double max_ttft_p95_ratio = 1.5;      // within each cache-hit band with enough requests on both
  double max_tpot_p95_ratio = 1.5;
  // Quality from shadow traffic: the share of the candidate's shadow pairs that disagree with
  // the primary (shadow_compare.h) less the noise floor's share, once the window has
  // min_shadow_pairs candidate pairs (else quality is not judged in that window).
  double max_shadow_disagreement_increase = 0.05;
  int64_t min_shadow_pairs = 10;
  // An eval suite (`sluice eval`) run against a stable and a candidate replica at each analysis
  // step, compared item by item (eval/compare.h with max_drop = eval_max_drop): an analysis step
  // passes only once the suite did not regress too. Empty: no suite.
  std::string eval_suite;
  double eval_max_drop = 0.02;
};

// Shadow traffic (router.h): copies of requests sent to another version, whose answers are
// compared with the primary's and never returned.
struct ShadowConfig {
  std::string version;         // where the copies go; a rollout's shadow: its candidate
  double fraction = 0;         // of requests (or of sessions), in [0, 1]; 0: off
  bool by_session = false;     // mirror whole sessions (hash of the session key) rather than requests
  double noise_fraction = 0;   // of requests also copied to a second replica of the primary's version
  int32_t max_in_flight = 32;  // shadow requests in flight; past it a copy is dropped and counted
  double timeout_seconds = 60;
  int64_t retention = 10000;   // compared pairs kept in the store, the newest
  bool enabled() const { return fraction > 0 || noise_fraction > 0; }
};

// {version?, fraction, by: request|session, noiseFraction, maxInFlight, timeout, retention};
// `where` names it in errors. `version` is required unless `in_rollout` (the candidate).
Result<ShadowConfig> parse_shadow(const nlohmann::json& j, std::string_view where, bool in_rollout);
nlohmann::json to_json(const ShadowConfig& shadow);
// Whether a request (or its session, by_session) is mirrored: hash mod 10000 < fraction x 10000,
// of a hash salted apart from the rollout's assignment (a rollout's first canary sessions would
// otherwise be exactly the mirrored ones, which never go to stable). `request_random` decides
// for requests without a session and when not by_session.
bool mirrored(std::string_view session, uint64_t request_random, double fraction, bool by_session);

// Before the first step, the candidate's replicas are sent the `prefixes` hottest prompt
// prefixes of the router's traffic (hot_prefixes.h), one request each with max_tokens 1, so a
// canary does not start with a cold KV cache; at most `timeout_seconds`, then the steps begin
// whatever answered. prefixes 0: no warming.
struct WarmConfig {
  int32_t prefixes = 32;
  double timeout_seconds = 30;
};

struct RolloutSpec {
  std::string name;
  std::string stable, candidate;  // version labels
  std::vector<RolloutStep> steps;
  AnalysisConfig analysis;
  ShadowConfig shadow;  // version: the candidate
  WarmConfig warm;
};

// An eval suite's verdict on a candidate (AnalysisConfig::eval_suite).
struct EvalVerdict {
  bool passed = false;
  std::string reason;
  nlohmann::json metrics;
};
// A replica as an eval reaches it: its OpenAI base URL (".../v1") and its API key ("" none).
struct EvalEndpoint {
  std::string url;
  std::string api_key;
};
// Runs `suite` against a stable and a candidate replica and compares the candidate's run with
// stable's; blocking. The router links no eval code: `sluice route` supplies it
// (cli/rollout_eval.h).
using EvalGate = std::function<Result<EvalVerdict>(const std::string& suite, double max_drop,
                                                   const EvalEndpoint& stable, const EvalEndpoint& candidate)>;

// Labels a new rollout may have (echoed in logs, errors, metrics labels and every history
// line): name, stable and candidate at most 256 bytes, no control characters. Checked when a
// rollout starts, not when a stored one is read back (one stored before the rule still loads).
Status check_new_rollout_labels(const RolloutSpec& spec);
// From the spec's JSON (YAML converted); errors name the field.
Result<RolloutSpec> parse_rollout(const nlohmann::json& spec);
nlohmann::json to_json(const RolloutSpec& spec);

// hash(session) mod 10000 < weight x 100.
bool assigned_to_candidate(std::string_view session, double weight_percent);
uint64_t session_hash(std::string_view session);  // FNV-1a 64

enum class RolloutPhase { kProgressing, kPaused, kPromoted, kAborted };
std::string_view phase_name(RolloutPhase phase);  // "progressing", "paused", "promoted", "aborted"

struct RolloutDecision {
  double at = 0;        // seconds since the epoch
  int32_t step = 0;     // the step it was taken at
  std::string action;   // "start", "set weight", "pause", "resume", "analysis passed",
                        // "analysis failed", "promote", "abort"
  std::string reason;
};

class Rollout {
 public:
  Rollout(RolloutSpec spec, double now);
  // A rollout resumed from its stored state(); an error if the state does not fit the spec.
  static Result<Rollout> restore(RolloutSpec spec, const nlohmann::json& state);
  nlohmann::json state() const;

  const RolloutSpec& spec() const { return spec_; }
  RolloutPhase phase() const { return phase_; }
  bool finished() const { return phase_ == RolloutPhase::kPromoted || phase_ == RolloutPhase::kAborted; }
  int32_t step() const { return step_; }          // the step being waited on (steps.size() once done)
  double weight() const { return weight_; }       // the candidate's share now, percent
  int32_t failed_analyses() const { return failed_; }
  // At an analysis step whose eval suite has not passed yet (AnalysisConfig::eval_suite).
  bool wants_eval() const;
  // The suite's verdict at this step: passed lets the step go on (with a passed analysis);
  // failed counts as a failed analysis.
  std::vector<RolloutDecision> record_eval(double now, bool passed, const std::string& reason);

  // Whether any request goes to each version now: the candidate not once aborted or at 0%, the
  // stable not once promoted or at 100%.
  bool candidate_has_share() const { return phase_ != RolloutPhase::kAborted && weight_ > 0; }
  bool stable_has_share() const { return phase_ == RolloutPhase::kAborted || weight_ < 100; }
  // Where a request of `session` goes now (sticky, see above).
  bool routes_to_candidate(std::string_view session) const {
    return phase_ != RolloutPhase::kAborted && assigned_to_candidate(session, weight_);
  }
  // A request routed while the rollout runs, to the candidate or not (pause steps count them;
  // not while held).
  void count_request(bool to_candidate);

  // Held while `version` (stable or candidate) has no replica to take its share: no step moves,
  // and neither the time held nor the requests routed meanwhile count toward a pause, so the
  // clock never promotes a candidate no request reached. Returns whether that changed anything.
  bool hold(double now, const std::string& version);
  bool unhold(double now);
  const std::string& held_for() const { return held_for_; }  // "" when not held

  // Moves through every step whose condition holds at `now` (setWeight at once; a pause once
  // its duration has passed and its requests were seen; an analysis step once an analysis
  // passed at it); past the last step, promotes. Nothing while paused by hand, held or finished.
  std::vector<RolloutDecision> advance(double now);
  // An analysis of the candidate against stable: a failure past failure_limit aborts.
  std::vector<RolloutDecision> record_analysis(double now, bool passed, const std::string& reason);

  // By hand (the admin API). Errors when the rollout is finished (or not paused, for resume).
  Result<RolloutDecision> pause(double now, const std::string& reason);
  Result<RolloutDecision> resume(double now, const std::string& reason = {});
  Result<RolloutDecision> promote(double now, const std::string& reason);
  Result<RolloutDecision> abort(double now, const std::string& reason);

 private:
  RolloutDecision decide(double now, std::string action, std::string reason) const {
    return {now, step_, std::move(action), std::move(reason)};
  }
  void enter_step(double now);
  static double stopped_time(double since, double now, bool other_running, double other_since);

  RolloutSpec spec_;
  RolloutPhase phase_ = RolloutPhase::kProgressing;
  int32_t step_ = 0;
  double weight_ = 0;
  double step_started_ = 0;        // when the current step was entered (less the time paused by hand)
  double paused_at_ = 0;           // when it was paused by hand
  std::string held_for_;           // the version whose missing replicas hold the steps
  double held_at_ = 0;             // since when
  int64_t requests_at_step_ = 0;   // requests routed since then
  bool analysis_passed_at_step_ = false;
  bool eval_passed_at_step_ = false;
  int32_t failed_ = 0;
};

}  // namespace sluice::router
