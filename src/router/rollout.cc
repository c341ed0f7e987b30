#include "router/rollout.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <tuple>

namespace sluice::router {
namespace {

using Json = nlohmann::json;

Status bad(std::string message) { return Status::error(std::move(message), StatusCode::kInvalid); }

// Only `allowed` keys in `object` (named `where` in the message).
Status known_keys(const Json& object, std::initializer_list<std::string_view> allowed, std::string_view where) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    bool ok = false;
    for (std::string_view k : allowed) ok = ok || it.key() == k;
    if (!ok) return bad(fmt::format("{}: unknown field '{}'", where, it.key()));
  }
  return Status::ok();
}

// Seconds: a number, or a string of digits with a unit s, m or h ("90s", "2m", "1h").
Result<double> parse_duration(const Json& v, std::string_view where) {
  if (v.is_number() && v.get<double>() >= 0 && std::isfinite(v.get<double>())) return v.get<double>();
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    double scale = 1;
    std::string digits = s;
    if (!s.empty() && (s.back() == 's' || s.back() == 'm' || s.back() == 'h')) {
      scale = s.back() == 'h' ? 3600 : s.back() == 'm' ? 60 : 1;
      digits = s.substr(0, s.size() - 1);
    }
    char* end = nullptr;
    const double x = digits.empty() ? -1 : std::strtod(digits.c_str(), &end);
    if (end != nullptr && *end == '\0' && x >= 0 && std::isfinite(x)) return x * scale;
  }
  return Error(StatusCode::kInvalid, "{}: a duration is seconds or a string such as \"90s\", \"2m\", \"1h\"; got {}",
               where, v.dump());
}

std::vector<RolloutStep> default_steps() {
  std::vector<RolloutStep> steps;
  for (double w : {1.0, 5.0, 10.0, 25.0, 50.0}) {
    steps.push_back({RolloutStep::Kind::kSetWeight, w, -1, 0});
    steps.push_back({RolloutStep::Kind::kPause, 0, 60, 100});
  }
  steps.push_back({RolloutStep::Kind::kSetWeight, 100, -1, 0});
  return steps;
}

}  // namespace

uint64_t session_hash(std::string_view session) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : session) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

bool assigned_to_candidate(std::string_view session, double weight_percent) {
  return static_cast<double>(session_hash(session) % 10000) < weight_percent * 100;
}

bool mirrored(std::string_view session, uint64_t request_random, double fraction, bool by_session) {
  if (fraction <= 0) return false;
  const uint64_t h = by_session && !session.empty() ? session_hash(fmt::format("shadow\x1f{}", session)) : request_random;
  return static_cast<double>(h % 10000) < fraction * 10000;
}

Result<ShadowConfig> parse_shadow(const Json& j, std::string_view where, bool in_rollout) {
  ShadowConfig c;
  if (j.is_null()) return c;
  if (!j.is_object()) return Error(StatusCode::kInvalid, "{} must be an object", where);
  SLUICE_RETURN_IF_ERROR(known_keys(j, {"version", "fraction", "by", "noiseFraction", "maxInFlight", "timeout", "retention"},
                                    where));
  if (j.contains("version")) {
    if (in_rollout) return Error(StatusCode::kInvalid, "{}.version: a rollout's shadow goes to its candidate", where);
    if (!j["version"].is_string()) return Error(StatusCode::kInvalid, "{}.version must be a string", where);
    c.version = j["version"].get<std::string>();
  }
  for (auto [key, out] : {std::pair{"fraction", &c.fraction}, std::pair{"noiseFraction", &c.noise_fraction}}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_number() || !(j[key].get<double>() >= 0 && j[key].get<double>() <= 1)) {
      return Error(StatusCode::kInvalid, "{}.{} must be a number in [0, 1], got {}", where, key, j[key].dump());
    }
    *out = j[key].get<double>();
  }
  if (j.contains("by")) {
    if (j["by"] != "request" && j["by"] != "session") {
      return Error(StatusCode::kInvalid, "{}.by must be \"request\" or \"session\", got {}", where, j["by"].dump());
    }
    c.by_session = j["by"] == "session";
  }
  if (j.contains("maxInFlight")) {
    if (!j["maxInFlight"].is_number_integer() || j["maxInFlight"].get<int64_t>() < 1 ||
        j["maxInFlight"].get<int64_t>() > 100000) {
      return Error(StatusCode::kInvalid, "{}.maxInFlight must be an integer in [1, 100000]", where);
    }
    c.max_in_flight = j["maxInFlight"].get<int32_t>();
  }
  if (j.contains("timeout")) {
    SLUICE_ASSIGN_OR_RETURN(c.timeout_seconds, parse_duration(j["timeout"], fmt::format("{}.timeout", where)));
    if (c.timeout_seconds <= 0) return Error(StatusCode::kInvalid, "{}.timeout must be > 0", where);
  }
  if (j.contains("retention")) {
    if (!j["retention"].is_number_integer() || j["retention"].get<int64_t>() < 1) {
      return Error(StatusCode::kInvalid, "{}.retention must be an integer >= 1 (pairs kept)", where);
    }
    c.retention = j["retention"].get<int64_t>();
  }
  if (!in_rollout && c.enabled() && c.version.empty() && c.fraction > 0) {
    return Error(StatusCode::kInvalid, "{}.version is required: the version the copies go to", where);
  }
  return c;
}

Json to_json(const ShadowConfig& c) {
  Json j = Json::object();
  if (!c.version.empty()) j["version"] = c.version;
  j["fraction"] = c.fraction;
  j["by"] = c.by_session ? "session" : "request";
  j["noiseFraction"] = c.noise_fraction;
  j["maxInFlight"] = c.max_in_flight;
  j["timeout"] = c.timeout_seconds;
  j["retention"] = c.retention;
  return j;
}

std::string_view phase_name(RolloutPhase phase) {
  switch (phase) {
    case RolloutPhase::kProgressing: return "progressing";
    case RolloutPhase::kPaused: return "paused";
    case RolloutPhase::kPromoted: return "promoted";
    case RolloutPhase::kAborted: return "aborted";
  }
  return "unknown";
}

Status check_new_rollout_labels(const RolloutSpec& spec) {
  constexpr size_t kMaxLabel = 256;
  for (auto [key, value] :
       {std::pair{"name", &spec.name}, std::pair{"stable", &spec.stable}, std::pair{"candidate", &spec.candidate}}) {
    if (value->size() > kMaxLabel) {
      return Status::error(fmt::format("rollout: '{}' is {} bytes; at most {}", key, value->size(), kMaxLabel),
                           StatusCode::kInvalid);
    }
    if (std::ranges::any_of(*value, [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; })) {
      return Status::error(fmt::format("rollout: '{}' holds a control character", key), StatusCode::kInvalid);
    }
  }
  return Status::ok();
}

Result<RolloutSpec> parse_rollout(const Json& j) {
  if (!j.is_object()) return Error(StatusCode::kInvalid, "a rollout is an object, got {}", j.type_name());
  SLUICE_RETURN_IF_ERROR(known_keys(j, {"name", "stable", "candidate", "steps", "analysis", "shadow", "warm"}, "rollout"));
  RolloutSpec spec;
  for (auto [key, out] : {std::pair{"name", &spec.name}, std::pair{"stable", &spec.stable},
                          std::pair{"candidate", &spec.candidate}}) {
    // A version written as a plain YAML number (candidate: 2) is the version "2", as --backend
    // URL,version=2 names it.
    if (j.contains(key) && j[key].is_number_integer()) {
      *out = j[key].dump();
      continue;
    }
    if (j.contains(key) && j[key].is_number()) {  // 1.10 would be read as 1.1
      return Error(StatusCode::kInvalid, "rollout: '{}' {} is a number: quote it (\"{}\") to name a version", key,
                   j[key].dump(), j[key].dump());
    }
    if (!j.contains(key) || !j[key].is_string() || j[key].get<std::string>().empty()) {
      return Error(StatusCode::kInvalid, "rollout: '{}' is required (a non-empty string)", key);
    }
    *out = j[key].get<std::string>();
  }
  if (spec.stable == spec.candidate) {
    return Error(StatusCode::kInvalid, "rollout: stable and candidate are the same version '{}'", spec.stable);
  }
  if (!j.contains("steps") || j["steps"].is_null()) {
    spec.steps = default_steps();
  } else {
    if (!j["steps"].is_array() || j["steps"].empty()) return Error(StatusCode::kInvalid, "rollout: 'steps' must be a non-empty list");
    for (size_t i = 0; i < j["steps"].size(); ++i) {
      const Json& s = j["steps"][i];
      const std::string where = fmt::format("rollout: steps[{}]", i);
      if (!s.is_object() || s.size() != 1) {
        return Error(StatusCode::kInvalid, "{}: one of {{setWeight: N}}, {{pause: {{...}}}}, {{analysis: {{}}}}", where);
      }
      RolloutStep step;
      if (s.contains("setWeight")) {
        const Json& w = s["setWeight"];
        if (!w.is_number() || !(w.get<double>() >= 0 && w.get<double>() <= 100)) {
          return Error(StatusCode::kInvalid, "{}: setWeight must be a number in [0, 100], got {}", where, w.dump());
        }
        step = {RolloutStep::Kind::kSetWeight, w.get<double>(), -1, 0};
      } else if (s.contains("pause")) {
        const Json& p = s["pause"].is_null() ? Json::object() : s["pause"];
        if (!p.is_object()) return Error(StatusCode::kInvalid, "{}: pause takes {{duration, minRequests}}", where);
        SLUICE_RETURN_IF_ERROR(known_keys(p, {"duration", "minRequests"}, where + ".pause"));
        step.kind = RolloutStep::Kind::kPause;
        if (p.contains("duration")) {
          SLUICE_ASSIGN_OR_RETURN(step.pause_seconds, parse_duration(p["duration"], where + ".pause.duration"));
        }
        if (p.contains("minRequests")) {
          if (!p["minRequests"].is_number_integer() || p["minRequests"].get<int64_t>() < 0) {
            return Error(StatusCode::kInvalid, "{}.pause.minRequests must be an integer >= 0", where);
          }
          step.min_requests = p["minRequests"].get<int64_t>();
        }
        if (step.pause_seconds < 0 && step.min_requests > 0) step.pause_seconds = 0;  // requests alone
      } else if (s.contains("analysis")) {
        const Json& a = s["analysis"];
        if (!a.is_null() && !(a.is_object() && a.empty())) {
          return Error(StatusCode::kInvalid, "{}: analysis takes no settings here (see the rollout's 'analysis')", where);
        }
        step.kind = RolloutStep::Kind::kAnalysis;
      } else {
        return Error(StatusCode::kInvalid, "{}: unknown step '{}' (setWeight, pause or analysis)", where, s.begin().key());
      }
      spec.steps.push_back(step);
    }
  }
  if (j.contains("analysis") && !j["analysis"].is_null()) {
    const Json& a = j["analysis"];
    if (!a.is_object()) return Error(StatusCode::kInvalid, "rollout: 'analysis' must be an object");
    SLUICE_RETURN_IF_ERROR(known_keys(a, {"interval", "failureLimit", "minRequests", "maxErrorRateIncrease",
                                          "maxRefusalRateIncrease",
                                          "maxTtftP95Ratio", "maxTpotP95Ratio", "maxShadowDisagreementIncrease",
                                          "minShadowPairs", "evalSuite", "evalMaxDrop"},
                                      "rollout.analysis"));
    if (a.contains("minRequests")) {
      if (!a["minRequests"].is_number_integer() || a["minRequests"].get<int64_t>() < 1) {
        return Error(StatusCode::kInvalid, "rollout.analysis.minRequests must be an integer >= 1");
      }
      spec.analysis.min_requests = a["minRequests"].get<int64_t>();
    }
    if (a.contains("minShadowPairs")) {
      if (!a["minShadowPairs"].is_number_integer() || a["minShadowPairs"].get<int64_t>() < 1) {
        return Error(StatusCode::kInvalid, "rollout.analysis.minShadowPairs must be an integer >= 1");
      }
      spec.analysis.min_shadow_pairs = a["minShadowPairs"].get<int64_t>();
    }
    if (a.contains("evalSuite")) {
      if (!a["evalSuite"].is_string()) return Error(StatusCode::kInvalid, "rollout.analysis.evalSuite must be a path");
      spec.analysis.eval_suite = a["evalSuite"].get<std::string>();
    }
    for (auto [key, out, lo] : {std::tuple{"maxErrorRateIncrease", &spec.analysis.max_error_rate_increase, 0.0},
                                std::tuple{"maxRefusalRateIncrease", &spec.analysis.max_refusal_rate_increase, 0.0},
                                std::tuple{"evalMaxDrop", &spec.analysis.eval_max_drop, 0.0},
                                std::tuple{"maxShadowDisagreementIncrease",
                                           &spec.analysis.max_shadow_disagreement_increase, 0.0},
                                std::tuple{"maxTtftP95Ratio", &spec.analysis.max_ttft_p95_ratio, 1.0},
                                std::tuple{"maxTpotP95Ratio", &spec.analysis.max_tpot_p95_ratio, 1.0}}) {
      if (!a.contains(key)) continue;
      if (!a[key].is_number() || !(a[key].get<double>() >= lo) || !std::isfinite(a[key].get<double>())) {
        return Error(StatusCode::kInvalid, "rollout.analysis.{} must be a number >= {}", key, lo);
      }
      *out = a[key].get<double>();
    }
    if (a.contains("interval")) {
      SLUICE_ASSIGN_OR_RETURN(spec.analysis.interval_seconds, parse_duration(a["interval"], "rollout.analysis.interval"));
      if (spec.analysis.interval_seconds <= 0) return Error(StatusCode::kInvalid, "rollout.analysis.interval must be > 0");
    }
    if (a.contains("failureLimit")) {
      if (!a["failureLimit"].is_number_integer() || a["failureLimit"].get<int64_t>() < 0 ||
          a["failureLimit"].get<int64_t>() > 1000) {
        return Error(StatusCode::kInvalid, "rollout.analysis.failureLimit must be an integer in [0, 1000]");
      }
      spec.analysis.failure_limit = a["failureLimit"].get<int32_t>();
    }
  }
  if (j.contains("shadow")) {
    SLUICE_ASSIGN_OR_RETURN(spec.shadow, parse_shadow(j["shadow"], "rollout.shadow", true));
  }
  if (j.contains("warm") && !j["warm"].is_null()) {
    const Json& w = j["warm"];
    if (!w.is_object()) return Error(StatusCode::kInvalid, "rollout: 'warm' must be an object {{prefixes, timeout}}");
    SLUICE_RETURN_IF_ERROR(known_keys(w, {"prefixes", "timeout"}, "rollout.warm"));
    if (w.contains("prefixes")) {
      if (!w["prefixes"].is_number_integer() || w["prefixes"].get<int64_t>() < 0 || w["prefixes"].get<int64_t>() > 1024) {
        return Error(StatusCode::kInvalid, "rollout.warm.prefixes must be an integer in [0, 1024]");
      }
      spec.warm.prefixes = w["prefixes"].get<int32_t>();
    }
    if (w.contains("timeout")) {
      SLUICE_ASSIGN_OR_RETURN(spec.warm.timeout_seconds, parse_duration(w["timeout"], "rollout.warm.timeout"));
      if (spec.warm.timeout_seconds <= 0) return Error(StatusCode::kInvalid, "rollout.warm.timeout must be > 0");
    }
  }
  return spec;
}

Json to_json(const RolloutSpec& spec) {
  Json steps = Json::array();
  for (const RolloutStep& s : spec.steps) {
    switch (s.kind) {
      case RolloutStep::Kind::kSetWeight: steps.push_back({{"setWeight", s.weight}}); break;
      case RolloutStep::Kind::kAnalysis: steps.push_back({{"analysis", Json::object()}}); break;
      case RolloutStep::Kind::kPause: {
        Json p = Json::object();
        if (s.pause_seconds >= 0) p["duration"] = s.pause_seconds;
        if (s.min_requests > 0) p["minRequests"] = s.min_requests;
        steps.push_back({{"pause", p}});
        break;
      }
    }
  }
  return {{"name", spec.name},
          {"stable", spec.stable},
          {"candidate", spec.candidate},
          {"steps", steps},
          {"analysis",
           {{"interval", spec.analysis.interval_seconds},
            {"failureLimit", spec.analysis.failure_limit},
            {"minRequests", spec.analysis.min_requests},
            {"maxErrorRateIncrease", spec.analysis.max_error_rate_increase},
            {"maxRefusalRateIncrease", spec.analysis.max_refusal_rate_increase},
            {"maxTtftP95Ratio", spec.analysis.max_ttft_p95_ratio},
            {"maxTpotP95Ratio", spec.analysis.max_tpot_p95_ratio},
            {"maxShadowDisagreementIncrease", spec.analysis.max_shadow_disagreement_increase},
            {"minShadowPairs", spec.analysis.min_shadow_pairs},
            {"evalSuite", spec.analysis.eval_suite},
            {"evalMaxDrop", spec.analysis.eval_max_drop}}},
          {"shadow", to_json(spec.shadow)},
          {"warm", {{"prefixes", spec.warm.prefixes}, {"timeout", spec.warm.timeout_seconds}}}};
}

Rollout::Rollout(RolloutSpec spec, double now) : spec_(std::move(spec)), step_started_(now) {}

Json Rollout::state() const {
  return {{"phase", phase_name(phase_)}, {"step", step_},
          {"weight", weight_},           {"step_started", step_started_},
          {"requests_at_step", requests_at_step_}, {"analysis_passed_at_step", analysis_passed_at_step_},
          {"eval_passed_at_step", eval_passed_at_step_}, {"failed_analyses", failed_},
          {"paused_at", paused_at_}, {"held_for", held_for_}, {"held_at", held_at_}};
}

Result<Rollout> Rollout::restore(RolloutSpec spec, const Json& state) {
  Rollout r(std::move(spec), 0);
  try {
    const std::string phase = state.at("phase").get<std::string>();
    bool known = false;
    for (RolloutPhase p : {RolloutPhase::kProgressing, RolloutPhase::kPaused, RolloutPhase::kPromoted,
                           RolloutPhase::kAborted}) {
      if (phase_name(p) == phase) r.phase_ = p, known = true;
    }
    if (!known) return Error(StatusCode::kInvalid, "stored rollout state: unknown phase '{}'", phase);
    r.step_ = state.at("step").get<int32_t>();
    r.weight_ = state.at("weight").get<double>();
    r.step_started_ = state.at("step_started").get<double>();
    r.requests_at_step_ = state.at("requests_at_step").get<int64_t>();
    r.analysis_passed_at_step_ = state.at("analysis_passed_at_step").get<bool>();
    r.failed_ = state.at("failed_analyses").get<int32_t>();
    r.eval_passed_at_step_ = state.value("eval_passed_at_step", false);
    r.paused_at_ = state.value("paused_at", 0.0);
    r.held_for_ = state.value("held_for", std::string());
    r.held_at_ = state.value("held_at", 0.0);
  } catch (const nlohmann::json::exception& e) {
    return Error(StatusCode::kInvalid, "stored rollout state: {}", e.what());
  }
  if (r.step_ < 0 || r.step_ > static_cast<int32_t>(r.spec_.steps.size()) || !(r.weight_ >= 0 && r.weight_ <= 100)) {
    return Error(StatusCode::kInvalid, "stored rollout state: step {} or weight {} does not fit the rollout's {} steps",
                 r.step_, r.weight_, r.spec_.steps.size());
  }
  return r;
}

void Rollout::count_request(bool) {
  if (!finished() && held_for_.empty()) ++requests_at_step_;
}

bool Rollout::hold(double now, const std::string& version) {
  if (finished() || version.empty() || held_for_ == version) return false;
  if (held_for_.empty()) held_at_ = now;
  held_for_ = version;
  return true;
}

// The clock of a pause stops while the rollout is held or paused by hand; when one of the two
// ends, it moves step_started_ on by its own time less what overlaps the other, still going
// (which counts that overlap when it ends), so time under both is taken off once.
double Rollout::stopped_time(double since, double now, bool other_running, double other_since) {
  const double own = std::max(0.0, now - since);
  return other_running ? own - std::max(0.0, now - std::max(since, other_since)) : own;
}

bool Rollout::unhold(double now) {
  if (held_for_.empty()) return false;
  const bool paused_by_hand = phase_ == RolloutPhase::kPaused && paused_at_ > 0;
  step_started_ += stopped_time(held_at_, now, paused_by_hand, paused_at_);
  held_for_.clear();
  held_at_ = 0;
  return true;
}

void Rollout::enter_step(double now) {
  step_started_ = now;
  if (!held_for_.empty()) held_at_ = now;  // (entered by a resume while held) the hold counts from here
  requests_at_step_ = 0;
  analysis_passed_at_step_ = false;
  eval_passed_at_step_ = false;
}

bool Rollout::wants_eval() const {
  return phase_ == RolloutPhase::kProgressing && !spec_.analysis.eval_suite.empty() && !eval_passed_at_step_ &&
         step_ < static_cast<int32_t>(spec_.steps.size()) &&
         spec_.steps[static_cast<size_t>(step_)].kind == RolloutStep::Kind::kAnalysis;
}

std::vector<RolloutDecision> Rollout::record_eval(double now, bool passed, const std::string& reason) {
  if (finished()) return {};
  if (!passed) return record_analysis(now, false, reason);
  eval_passed_at_step_ = true;
  return {decide(now, "eval passed", reason)};
}

std::vector<RolloutDecision> Rollout::advance(double now) {
  std::vector<RolloutDecision> out;
  if (phase_ != RolloutPhase::kProgressing || !held_for_.empty()) return out;
  const auto num_steps = static_cast<int32_t>(spec_.steps.size());
  while (step_ < num_steps) {
    const RolloutStep& s = spec_.steps[static_cast<size_t>(step_)];
    if (s.kind == RolloutStep::Kind::kSetWeight) {
      weight_ = s.weight;
      out.push_back(decide(now, "set weight", fmt::format("the candidate takes {}%", s.weight)));
    } else if (s.kind == RolloutStep::Kind::kPause) {
      if (s.pause_seconds < 0) {
        phase_ = RolloutPhase::kPaused;
        out.push_back(decide(now, "pause", "paused until resumed"));
        return out;
      }
      if (now - step_started_ < s.pause_seconds || requests_at_step_ < s.min_requests) return out;
      out.push_back(decide(now, "pause done", fmt::format("{:.0f} s and {} requests at {}%", now - step_started_,
                                                          requests_at_step_, weight_)));
    } else {
      if (!analysis_passed_at_step_) return out;
      if (!spec_.analysis.eval_suite.empty() && !eval_passed_at_step_) return out;
    }
    ++step_;
    enter_step(now);
  }
  weight_ = 100;
  phase_ = RolloutPhase::kPromoted;
  out.push_back(decide(now, "promote", "every step passed"));
  return out;
}

std::vector<RolloutDecision> Rollout::record_analysis(double now, bool passed, const std::string& reason) {
  std::vector<RolloutDecision> out;
  if (finished()) return out;
  if (passed) {
    analysis_passed_at_step_ = true;
    out.push_back(decide(now, "analysis passed", reason));
    return out;
  }
  ++failed_;
  out.push_back(decide(now, "analysis failed", reason));
  if (failed_ > spec_.analysis.failure_limit) {
    weight_ = 0;
    phase_ = RolloutPhase::kAborted;
    out.push_back(decide(now, "abort",
                         fmt::format("{} failed analyses, more than the failureLimit of {}; the last: {}", failed_,
                                     spec_.analysis.failure_limit, reason)));
  }
  return out;
}

Result<RolloutDecision> Rollout::pause(double now, const std::string& reason) {
  if (finished() || phase_ == RolloutPhase::kPaused) {
    return Error(StatusCode::kInvalid, "the rollout is {}: it cannot be paused", phase_name(phase_));
  }
  phase_ = RolloutPhase::kPaused;
  paused_at_ = now;
  return decide(now, "pause", reason.empty() ? "paused by hand" : reason);
}

Result<RolloutDecision> Rollout::resume(double now, const std::string& reason) {
  if (phase_ != RolloutPhase::kPaused) {
    return Error(StatusCode::kInvalid, "the rollout is {}: only a paused one resumes", phase_name(phase_));
  }
  phase_ = RolloutPhase::kProgressing;
  // Recorded at the step it was paused at; an open-ended pause step is what was waited on:
  // resuming passes it.
  RolloutDecision d = decide(now, "resume", reason.empty() ? "resumed by hand" : reason);
  if (step_ < static_cast<int32_t>(spec_.steps.size())) {
    const RolloutStep& s = spec_.steps[static_cast<size_t>(step_)];
    if (s.kind == RolloutStep::Kind::kPause && s.pause_seconds < 0) {
      ++step_;
      enter_step(now);
    } else if (paused_at_ > 0) {  // a timed pause counts the time it ran, not the time paused
      step_started_ += stopped_time(paused_at_, now, !held_for_.empty(), held_at_);
    }
  }
  paused_at_ = 0;
  return d;
}

Result<RolloutDecision> Rollout::promote(double now, const std::string& reason) {
  if (finished()) return Error(StatusCode::kInvalid, "the rollout is {} already", phase_name(phase_));
  weight_ = 100;
  step_ = static_cast<int32_t>(spec_.steps.size());
  phase_ = RolloutPhase::kPromoted;
  return decide(now, "promote", reason.empty() ? "promoted by hand" : reason);
}

Result<RolloutDecision> Rollout::abort(double now, const std::string& reason) {
  if (finished()) return Error(StatusCode::kInvalid, "the rollout is {} already", phase_name(phase_));
  weight_ = 0;
  phase_ = RolloutPhase::kAborted;
  return decide(now, "abort", reason.empty() ? "aborted by hand" : reason);
}

}  // namespace sluice::router
