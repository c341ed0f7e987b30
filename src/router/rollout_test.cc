#include "router/rollout.h"

#include <filesystem>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "router/hot_prefixes.h"
#include "router/rollout_analysis.h"
#include "router/rollout_store.h"

namespace sluice::router {
namespace {

using Json = nlohmann::json;

RolloutSpec spec_of(const std::string& json) {
  auto s = parse_rollout(Json::parse(json));
  EXPECT_TRUE(s.has_value()) << (s ? "" : s.error().message());
  return s ? *s : RolloutSpec{};
}

TEST(Rollout, ParsesArgoStepsAndDefaultsAndNamesWhatIsWrong) {
  const RolloutSpec d = spec_of(R"({"name": "r", "stable": "v1", "candidate": "v2"})");
  // setWeight 1, 5, 10, 25, 50, each with a pause of 60 s and 100 requests, then 100.
  ASSERT_EQ(d.steps.size(), 11u);
  EXPECT_EQ(d.steps[0].weight, 1);
  EXPECT_EQ(d.steps[1].kind, RolloutStep::Kind::kPause);
  EXPECT_EQ(d.steps[1].pause_seconds, 60);
  EXPECT_EQ(d.steps[1].min_requests, 100);
  EXPECT_EQ(d.steps[10].weight, 100);
  const RolloutSpec s = spec_of(R"({"name": "r", "stable": "v1", "candidate": "v2",
      "steps": [{"setWeight": 5}, {"pause": {"duration": "2m", "minRequests": 10}}, {"pause": {}}, {"analysis": {}},
                {"setWeight": 100}],
      "analysis": {"interval": "15s", "failureLimit": 0}})");
  ASSERT_EQ(s.steps.size(), 5u);
  EXPECT_EQ(s.steps[1].pause_seconds, 120);
  EXPECT_LT(s.steps[2].pause_seconds, 0);  // until resumed
  EXPECT_EQ(s.steps[3].kind, RolloutStep::Kind::kAnalysis);
  EXPECT_EQ(s.analysis.interval_seconds, 15);
  EXPECT_EQ(s.analysis.failure_limit, 0);
  // What is stored reads back the same.
  EXPECT_EQ(to_json(*parse_rollout(to_json(s))), to_json(s));
  // Versions written as plain YAML numbers are the versions --backend URL,version=2 names.
  const RolloutSpec numbered = spec_of(R"({"name": "r", "stable": 1, "candidate": 2})");
  EXPECT_EQ(numbered.stable, "1");
  EXPECT_EQ(numbered.candidate, "2");
  // A new rollout's labels are short and printable; a stored one is read back whatever they are.
  Json long_name = Json::parse(R"({"stable": "v1", "candidate": "v2"})");
  long_name["name"] = std::string(257, 'n');
  auto stored = parse_rollout(long_name);
  ASSERT_TRUE(stored) << stored.error().message();
  EXPECT_EQ(check_new_rollout_labels(*stored).message(), "rollout: 'name' is 257 bytes; at most 256");
  stored->name = "a\x1b[2J";
  EXPECT_EQ(check_new_rollout_labels(*stored).message(), "rollout: 'name' holds a control character");
  stored->name = "r";
  EXPECT_TRUE(check_new_rollout_labels(*stored));
  auto decimal = parse_rollout(Json::parse(R"({"name": "r", "stable": "v1", "candidate": 1.10})"));
  ASSERT_FALSE(decimal);
  EXPECT_NE(decimal.error().message().find("is a number: quote it"), std::string::npos) << decimal.error().message();
  const std::pair<const char*, const char*> bad[] = {
      {R"({"stable": "v1", "candidate": "v2"})", "'name' is required"},
      {R"({"name": "r", "stable": "v1", "candidate": "v1"})", "the same version 'v1'"},
      {R"({"name": "r", "stable": "v1", "candidate": "v2", "steps": [{"setWeight": 101}]})",
       "steps[0]: setWeight must be"},
      {R"({"name": "r", "stable": "v1", "candidate": "v2", "steps": [{"pause": {"duration": "5 min"}}]})",
       "steps[0].pause.duration"},
      {R"({"name": "r", "stable": "v1", "candidate": "v2", "steps": [{"pause": {"for": 1}}]})", "unknown field 'for'"},
      {R"({"name": "r", "stable": "v1", "candidate": "v2", "steps": [{"setCanaryScale": {}}]})",
       "unknown step 'setCanaryScale'"},
      {R"({"name": "r", "stable": "v1", "candidate": "v2", "steps": []})", "non-empty list"},
      {R"({"name": "r", "stable": "v1", "candidate": "v2", "strategy": {}})", "unknown field 'strategy'"},
      {R"({"name": "r", "stable": "v1", "candidate": "v2", "analysis": {"failureLimit": -1}})", "failureLimit"},
  };
  for (const auto& [json, word] : bad) {
    auto r = parse_rollout(Json::parse(json));
    ASSERT_FALSE(r.has_value()) << json;
    EXPECT_NE(r.error().message().find(word), std::string::npos) << json << ": " << r.error().message();
  }
}

TEST(Rollout, AssignmentIsStickyAndSplitsByWeight) {
  int at10 = 0;
  for (int i = 0; i < 10000; ++i) {
    const std::string session = fmt::format("session-{}", i);
    const bool at = assigned_to_candidate(session, 10);
    at10 += at;
    // Growing the weight never moves a session back to stable.
    if (at) {
      for (double w : {25.0, 50.0, 100.0}) EXPECT_TRUE(assigned_to_candidate(session, w)) << session;
    }
    EXPECT_FALSE(assigned_to_candidate(session, 0));
    EXPECT_TRUE(assigned_to_candidate(session, 100));
  }
  EXPECT_NEAR(at10, 1000, 150);
  // The same in every process: FNV-1a 64's published test value.
  EXPECT_EQ(session_hash("a"), 0xaf63dc4c8601ec8cULL);
}

TEST(Rollout, AnIdenticalCandidatePromotesThroughEveryStep) {
  Rollout r(spec_of(R"({"name": "r", "stable": "v1", "candidate": "v2",
      "steps": [{"setWeight": 10}, {"pause": {"duration": 60, "minRequests": 5}}, {"analysis": {}}, {"setWeight": 50}]})"),
            1000);
  auto d = r.advance(1000);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].action, "set weight");
  EXPECT_EQ(r.weight(), 10);
  EXPECT_EQ(r.step(), 1);
  for (int i = 0; i < 4; ++i) r.count_request(i == 0);
  EXPECT_TRUE(r.advance(1070).empty());  // 70 s, but only 4 requests
  r.count_request(false);
  d = r.advance(1070);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].action, "pause done");
  EXPECT_EQ(r.step(), 2);                // waits for an analysis that passes at this step
  EXPECT_TRUE(r.advance(2000).empty());
  r.record_analysis(2001, true, "error rate 0 vs 0");
  d = r.advance(2002);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].action, "set weight");
  EXPECT_EQ(d[1].action, "promote");
  EXPECT_EQ(r.phase(), RolloutPhase::kPromoted);
  EXPECT_EQ(r.weight(), 100);
  EXPECT_FALSE(r.abort(2003, "late").has_value());
}

// With an eval suite, an analysis step waits for both the traffic's analysis and the suite; a
// suite that regressed counts as a failed analysis; a restart keeps what passed.
TEST(Rollout, AnEvalSuiteGatesEachAnalysisStep) {
  const RolloutSpec spec = spec_of(R"({"name": "r", "stable": "v1", "candidate": "v2",
      "steps": [{"setWeight": 10}, {"analysis": {}}, {"setWeight": 50}, {"analysis": {}}],
      "analysis": {"failureLimit": 0, "evalSuite": "suite.yaml", "evalMaxDrop": 0.05}})");
  EXPECT_EQ(spec.analysis.eval_max_drop, 0.05);
  Rollout r(spec, 0);
  EXPECT_FALSE(r.wants_eval());  // not at an analysis step yet
  r.advance(1);
  EXPECT_EQ(r.step(), 1);
  EXPECT_TRUE(r.wants_eval());
  r.record_analysis(2, true, "traffic fine");
  EXPECT_TRUE(r.advance(3).empty());  // the suite has not passed yet
  auto d = r.record_eval(4, true, "no change");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].action, "eval passed");
  EXPECT_FALSE(r.wants_eval());
  // Restored mid-step: what passed at the step is kept.
  auto restored = Rollout::restore(spec, r.state());
  ASSERT_TRUE(restored) << restored.error().message();
  EXPECT_FALSE(restored->wants_eval());
  d = r.advance(5);
  EXPECT_EQ(r.step(), 3);
  EXPECT_EQ(r.weight(), 50);
  EXPECT_TRUE(r.wants_eval());  // again at the next analysis step
  d = r.record_eval(6, false, "eval suite.yaml: regressed");
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].action, "analysis failed");
  EXPECT_EQ(d[1].action, "abort");
  EXPECT_EQ(r.weight(), 0);
  EXPECT_FALSE(r.wants_eval());
}

TEST(Rollout, FailedAnalysesPastTheLimitAbortAndSendEverySessionBack) {
  Rollout r(spec_of(R"({"name": "r", "stable": "v1", "candidate": "v2", "steps": [{"setWeight": 100}, {"pause": {}}],
      "analysis": {"failureLimit": 1}})"), 0);
  r.advance(0);
  EXPECT_EQ(r.phase(), RolloutPhase::kPaused);  // an open-ended pause
  EXPECT_TRUE(r.routes_to_candidate("anyone"));
  auto d = r.record_analysis(10, false, "TTFT p95 2.1x stable's");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(r.phase(), RolloutPhase::kPaused);
  d = r.record_analysis(20, false, "error rate 4% vs 0%");
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[1].action, "abort");
  EXPECT_NE(d[1].reason.find("2 failed analyses, more than the failureLimit of 1; the last: error rate 4% vs 0%"),
            std::string::npos) << d[1].reason;
  EXPECT_EQ(r.weight(), 0);
  EXPECT_FALSE(r.routes_to_candidate("anyone"));
  EXPECT_FALSE(r.resume(30).has_value());
}

// Held (a version without replicas): no step moves, and neither the time held nor the requests
// routed meanwhile count toward a pause; the time under both a hold and a hand pause counts once.
TEST(Rollout, AHoldStopsThePausesClockAndCount) {
  Rollout r(spec_of(R"({"name": "r", "stable": "v1", "candidate": "v2",
      "steps": [{"setWeight": 20}, {"pause": {"duration": 10, "minRequests": 2}}, {"setWeight": 50}]})"), 0);
  r.advance(0);
  r.count_request(true);                 // 1 request, 1 s into the pause
  EXPECT_TRUE(r.hold(1, "v2"));
  EXPECT_FALSE(r.hold(2, "v2"));         // held already
  EXPECT_EQ(r.held_for(), "v2");
  for (int i = 0; i < 5; ++i) r.count_request(false);  // all to stable: they do not count
  EXPECT_TRUE(r.advance(50).empty());
  auto restarted = Rollout::restore(r.spec(), r.state());  // the hold survives a restart
  ASSERT_TRUE(restarted.has_value()) << restarted.error().message();
  r = std::move(*restarted);
  EXPECT_EQ(r.held_for(), "v2");
  ASSERT_TRUE(r.pause(40, "").has_value());  // paused by hand inside the hold, resumed after it
  EXPECT_TRUE(r.unhold(50));
  ASSERT_TRUE(r.resume(60).has_value());     // stopped from 1 to 60: the pause has run 1 s
  EXPECT_TRUE(r.advance(68).empty());        // 9 s
  r.count_request(true);
  const std::vector<RolloutDecision> d = r.advance(69);  // 10 s and 2 requests
  ASSERT_GE(d.size(), 2u);
  EXPECT_EQ(d[0].action, "pause done");
  EXPECT_EQ(d[0].reason, "10 s and 2 requests at 20%");
  EXPECT_EQ(r.weight(), 100);  // set weight 50, then past the last step: promoted
}

TEST(Rollout, PausesResumesAndEndsByHand) {
  Rollout r(spec_of(R"({"name": "r", "stable": "v1", "candidate": "v2",
      "steps": [{"setWeight": 20}, {"pause": {}}, {"setWeight": 40}, {"pause": {"duration": 10}}]})"), 0);
  const std::vector<RolloutDecision> first = r.advance(0);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].reason, "the candidate takes 20%");  // the step is the decision's own field
  EXPECT_EQ(r.phase(), RolloutPhase::kPaused);
  EXPECT_FALSE(r.pause(1, "").has_value());  // paused already
  auto resumed = r.resume(2);
  ASSERT_TRUE(resumed.has_value());
  EXPECT_EQ(resumed->reason, "resumed by hand");
  EXPECT_EQ(resumed->step, 1);  // the step it was paused at; the rollout goes on past it
  EXPECT_EQ(r.step(), 2);
  r.advance(2);
  EXPECT_EQ(r.weight(), 40);
  ASSERT_TRUE(r.pause(3, "looking at the dashboard").has_value());
  EXPECT_TRUE(r.advance(100).empty());       // paused by hand: nothing moves
  auto restarted = Rollout::restore(r.spec(), r.state());  // a router restarted meanwhile keeps when
  ASSERT_TRUE(restarted.has_value()) << restarted.error().message();  // the hand pause began
  r = std::move(*restarted);
  resumed = r.resume(100, "the dashboard looks fine");
  ASSERT_TRUE(resumed.has_value());
  EXPECT_EQ(resumed->reason, "the dashboard looks fine");
  // The 10 s pause ran 1 s (2 to 3) before the hand pause; the 97 s held do not count.
  EXPECT_TRUE(r.advance(100).empty());
  const std::vector<RolloutDecision> last = r.advance(109);
  ASSERT_EQ(last.size(), 2u);
  EXPECT_EQ(last[0].action, "pause done");
  EXPECT_EQ(last[0].reason.substr(0, 5), "10 s ") << last[0].reason;
  EXPECT_EQ(last[1].action, "promote");
  Rollout s(r.spec(), 0);
  s.advance(0);
  auto a = s.abort(5, "");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->reason, "aborted by hand");
  Rollout t(r.spec(), 0);
  ASSERT_TRUE(t.promote(5, "").has_value());
  EXPECT_EQ(t.weight(), 100);
}

TEST(RolloutStore, ARestartedRouterResumesAtTheSameStepWithTheSameWeight) {
  const std::string path = ::testing::TempDir() + "/rollouts.db";
  std::filesystem::remove(path);
  int64_t id = 0;
  {
    auto store = RolloutStore::open(path);
    ASSERT_TRUE(store.has_value()) << store.error().message();
    Rollout r(spec_of(R"({"name": "qwen-v2", "stable": "v1", "candidate": "v2",
        "steps": [{"setWeight": 5}, {"pause": {"duration": 60}}, {"setWeight": 25}, {"pause": {"duration": 60}}]})"), 100);
    auto created = (*store)->create(r, 100);
    ASSERT_TRUE(created.has_value());
    id = *created;
    for (const RolloutDecision& d : r.advance(100)) ASSERT_TRUE((*store)->record(id, d).is_ok());
    for (const RolloutDecision& d : r.advance(170)) ASSERT_TRUE((*store)->record(id, d).is_ok());
    r.count_request(true);
    ASSERT_TRUE((*store)->save(id, r, 170).is_ok());
    ASSERT_TRUE((*store)->record_analysis(id, {170, r.step(), true, "fine", {{"error_rate", 0}}}).is_ok());
    EXPECT_EQ(r.weight(), 25);
  }  // the router dies here
  auto store = RolloutStore::open(path);
  ASSERT_TRUE(store.has_value());
  auto latest = (*store)->list(1);
  ASSERT_TRUE(latest.has_value() && latest->size() == 1u);
  const StoredRollout stored = latest->front();
  EXPECT_EQ(stored.id, id);
  EXPECT_EQ(stored.spec.name, "qwen-v2");
  auto r = Rollout::restore(stored.spec, stored.state);
  ASSERT_TRUE(r.has_value()) << r.error().message();
  EXPECT_EQ(r->weight(), 25);
  EXPECT_EQ(r->step(), 3);
  // The same sessions on the candidate as before the restart.
  Rollout fresh(stored.spec, 0);
  fresh.advance(0);
  fresh.advance(60);
  for (int i = 0; i < 100; ++i) {
    const std::string session = fmt::format("s{}", i);
    EXPECT_EQ(r->routes_to_candidate(session), fresh.routes_to_candidate(session));
  }
  auto decisions = (*store)->decisions(id);
  ASSERT_TRUE(decisions.has_value());
  ASSERT_EQ(decisions->size(), 3u);
  EXPECT_EQ((*decisions)[1].action, "pause done");
  auto analyses = (*store)->analyses(id);
  ASSERT_TRUE(analyses.has_value());
  ASSERT_EQ(analyses->size(), 1u);
  EXPECT_EQ((*analyses)[0].metrics["error_rate"], 0);
  // Finished, it is stored as such (and still the latest: a restarted router routes by it).
  ASSERT_TRUE(r->promote(200, "").has_value());
  ASSERT_TRUE((*store)->save(id, *r, 200).is_ok());
  auto list = (*store)->list(10);
  ASSERT_TRUE(list.has_value());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].phase, "promoted");
  // A state that does not fit its spec is refused.
  EXPECT_FALSE(Rollout::restore(stored.spec, Json{{"phase", "progressing"}, {"step", 9}, {"weight", 5},
                                                  {"step_started", 0}, {"requests_at_step", 0},
                                                  {"analysis_passed_at_step", false}, {"failed_analyses", 0}})
                   .has_value());
  EXPECT_FALSE(Rollout::restore(stored.spec, Json{{"phase", "sideways"}}).has_value());
}

}  // namespace
}  // namespace sluice::router

namespace sluice::router {
namespace {

VersionWindow window(int requests, int errors, std::vector<std::pair<double, double>> ttft_at_hit = {},
                     std::vector<double> tpot = {}) {
  VersionWindow w;
  for (int i = 0; i < requests; ++i) {
    RequestOutcome o;
    o.error = i < errors;
    if (static_cast<size_t>(i) < ttft_at_hit.size()) o.hit_fraction = ttft_at_hit[i].first, o.ttft = ttft_at_hit[i].second;
    if (static_cast<size_t>(i) < tpot.size()) o.tpot = tpot[i];
    w.add(o);
  }
  return w;
}

std::vector<std::pair<double, double>> repeat(int n, double hit, double ttft) {
  return std::vector<std::pair<double, double>>(static_cast<size_t>(n), {hit, ttft});
}

TEST(RolloutAnalysis, NoVerdictWithoutEnoughRequestsOnBothVersions) {
  AnalysisConfig c;
  c.min_requests = 20;
  const AnalysisVerdict v = analyze(window(100, 0), window(19, 19), c);
  EXPECT_FALSE(v.conclusive);
  EXPECT_NE(v.reason.find("100 stable and 19 candidate requests; 20 of each needed"), std::string::npos) << v.reason;
}

TEST(RolloutAnalysis, ErrorRateAboveStablesFails) {
  AnalysisConfig c;
  c.min_requests = 20;
  EXPECT_TRUE(analyze(window(100, 1), window(100, 2), c).passed);  // +1 point: within the default 2
  const AnalysisVerdict v = analyze(window(100, 1), window(100, 10), c);
  ASSERT_TRUE(v.conclusive);
  EXPECT_FALSE(v.passed);
  EXPECT_NE(v.reason.find("error rate 10.0% vs stable's 1.0% (more than +2.0 points)"), std::string::npos) << v.reason;
  EXPECT_EQ(v.metrics["candidate"]["errors"], 10);
}

// A candidate that refuses what stable takes (404 model_not_found for every request) fails; the
// clients' own mistakes, as many on both, do not.
TEST(RolloutAnalysis, RefusalsAboveStablesFail) {
  AnalysisConfig c;
  c.min_requests = 20;
  auto refusing = [](int64_t requests, int64_t refused) {
    VersionWindow w;
    for (int64_t i = 0; i < requests; ++i) w.add(RequestOutcome{.refused = i < refused});
    return w;
  };
  EXPECT_TRUE(analyze(refusing(100, 30), refusing(100, 39), c).passed);  // within the default 10 points
  EXPECT_FALSE(analyze(refusing(100, 30), refusing(100, 41), c).passed);
  const AnalysisVerdict v = analyze(refusing(100, 0), refusing(100, 100), c);
  ASSERT_TRUE(v.conclusive);
  EXPECT_FALSE(v.passed);
  EXPECT_NE(v.reason.find("refusals (4xx) 100.0% vs stable's 0.0%"), std::string::npos) << v.reason;
  EXPECT_EQ(v.metrics["candidate"]["refused"], 100);
}

// A new version starts with a cold cache: its cold requests are compared with stable's cold
// ones, not with stable's warm ones.
TEST(RolloutAnalysis, TtftIsComparedWithinCacheHitBands) {
  AnalysisConfig c;
  c.min_requests = 20;
  // Stable: warm (hit 0.9, 0.1 s) and some cold (hit 0, 0.5 s); candidate: all cold, 0.5 s.
  auto stable_ttft = repeat(30, 0.9, 0.1);
  for (const auto& s : repeat(10, 0.0, 0.5)) stable_ttft.push_back(s);
  const AnalysisVerdict same = analyze(window(40, 0, stable_ttft), window(40, 0, repeat(40, 0.0, 0.5)), c);
  ASSERT_TRUE(same.conclusive);
  EXPECT_TRUE(same.passed) << same.reason;
  // Cold on both, but the candidate twice as slow: fails, naming the band.
  const AnalysisVerdict slow = analyze(window(40, 0, stable_ttft), window(40, 0, repeat(40, 0.0, 1.0)), c);
  EXPECT_FALSE(slow.passed);
  EXPECT_NE(slow.reason.find("TTFT p95 (cache hit [0, 0.25)) 1.000 s vs stable's 0.500 s (2.00x, more than 1.50x)"),
            std::string::npos) << slow.reason;
  // TPOT.
  const AnalysisVerdict tpot = analyze(window(40, 0, {}, std::vector<double>(40, 0.02)),
                                       window(40, 0, {}, std::vector<double>(40, 0.05)), c);
  EXPECT_FALSE(tpot.passed);
  EXPECT_NE(tpot.reason.find("TPOT p95 0.0500 s vs stable's 0.0200 s (2.50x"), std::string::npos) << tpot.reason;
  EXPECT_EQ(cache_band(-1), 4);
  EXPECT_EQ(cache_band(1.0), 3);
  EXPECT_EQ(cache_band(0.3), 1);
}

TEST(RolloutAnalysis, ShadowDisagreementIsJudgedAgainstTheNoiseFloor) {
  AnalysisConfig c;
  c.min_requests = 1;
  c.min_shadow_pairs = 10;
  const VersionWindow w = window(5, 0, {});
  // 20% of the candidate's pairs differ, 18% of stable's against stable: within +5 points.
  const AnalysisVerdict noisy = analyze(w, w, c, {.pairs = 100, .disagreements = 20, .noise_pairs = 50, .noise_disagreements = 9});
  ASSERT_TRUE(noisy.conclusive);
  EXPECT_TRUE(noisy.passed) << noisy.reason;
  EXPECT_NE(noisy.reason.find("shadow disagreement 20.0% vs noise floor 18.0%"), std::string::npos) << noisy.reason;
  // Without a noise floor the same 20% fails.
  const AnalysisVerdict bare = analyze(w, w, c, {.pairs = 100, .disagreements = 20});
  EXPECT_FALSE(bare.passed);
  EXPECT_NE(bare.reason.find("shadow disagreement 20.0% of 100 pairs vs the noise floor's 0.0% (more than +5.0 points)"),
            std::string::npos) << bare.reason;
  // Too few pairs: quality is not judged in this window.
  const AnalysisVerdict few = analyze(w, w, c, {.pairs = 9, .disagreements = 9});
  EXPECT_TRUE(few.passed) << few.reason;
  EXPECT_EQ(few.metrics["shadow"]["judged"], false);
  // A rollout with a shadow does not pass without a judged one: the window goes on...
  const AnalysisVerdict waiting = analyze(w, w, c, {.pairs = 9, .disagreements = 9}, /*shadow_required=*/true);
  EXPECT_FALSE(waiting.conclusive);
  EXPECT_TRUE(waiting.waiting_for_shadow);
  EXPECT_EQ(waiting.reason, "9 shadow pairs; 10 needed to judge quality");
  EXPECT_FALSE(analyze(window(0, 0, {}), w, c, {.pairs = 9}, true).waiting_for_shadow);  // too few requests first
  // ...but another check that fails is conclusive at once.
  const AnalysisVerdict broken = analyze(w, window(5, 5, {}), c, {.pairs = 2}, /*shadow_required=*/true);
  EXPECT_TRUE(broken.conclusive);
  EXPECT_FALSE(broken.passed);
  EXPECT_TRUE(analyze(w, w, c, {.pairs = 10}, /*shadow_required=*/true).passed);
}

TEST(HotPrefixes, TheMostSharedPrefixComesFirstWithARequestThatCarriesIt) {
  HotPrefixes hot(8, 1000, 100);
  const std::string system = "You are a careful assistant. ";  // 29 bytes: 3 whole chunks of 8
  for (int i = 0; i < 10; ++i) {
    hot.observe(system + fmt::format("question {}", i), "/v1/chat/completions", fmt::format(R"({{"q":{}}})", i));
  }
  const std::string other = "Translate into French: ";
  for (int i = 0; i < 3; ++i) hot.observe(other + fmt::format("text {}", i), "/v1/completions", fmt::format(R"({{"t":{}}})", i));
  hot.observe("A prompt seen once only, long enough", "/v1/completions", "{}");
  hot.observe("short", "/v1/completions", "{}");  // under a chunk: not counted
  const auto top = hot.hottest(5);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].requests, 10);
  EXPECT_EQ(top[0].prefix_bytes, 32u);  // "...assistant. " + the shared "question " start: 4 chunks
  EXPECT_EQ(top[0].target, "/v1/chat/completions");
  EXPECT_EQ(top[0].body, R"({"q":9})");  // the latest request with the prefix
  EXPECT_EQ(top[1].requests, 3);
  EXPECT_EQ(top[1].body, R"({"t":2})");
  EXPECT_EQ(hot.hottest(1).size(), 1u);
  // Bounded: the oldest requests are forgotten and so are prefixes whose request is gone.
  HotPrefixes small(8, 1000, 2);
  for (int i = 0; i < 5; ++i) small.observe(system + fmt::format("{}", i), "/v1/completions", fmt::format("{}", i));
  for (int i = 0; i < 2; ++i) small.observe(other + fmt::format("{}", i), "/v1/completions", "x");
  const auto left = small.hottest(5);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].body, "x");
}

}  // namespace
}  // namespace sluice::router
