// Canary rollouts in the router over scripted replicas: version splits, stickiness, a restart,
// the analysis promoting or rolling back, a follower splitting as its controller does.
#include "router/router_test_fixture.h"

#include <fstream>
#include <mutex>
#include <optional>

namespace sluice::router {
namespace {

using namespace router_testing;
using Json = nlohmann::ordered_json;

// A canary rollout through the admin API: sessions split by the weight and sticky, the rollout
// resumed by a restarted router from its store, an abort sending everyone back to stable.
TEST(Router, ARolloutSplitsStickySessionsByVersionAndResumesAfterARestart) {
  TestHttpServer a(named("a")), b(named("b"));
  const std::string db = ::testing::TempDir() + "/router_rollouts.db";
  std::filesystem::remove(db);
  auto configure = two_versions(a, b, db);
  // Which replica each of 200 sessions is answered by.
  auto route_sessions = [](Fixture& f) {
    std::vector<std::string> by;
    for (int i = 0; i < 200; ++i) {
      auto r = f.post("/v1/completions", R"({"prompt":"x"})", {{"X-Session-ID", fmt::format("s{}", i)}});
      EXPECT_TRUE(r) << r.error().message;
      by.push_back(r ? r->body : "");
    }
    return by;
  };
  const std::string on_b = R"({"replica":"b"})", on_a = R"({"replica":"a"})";
  std::vector<std::string> first;
  {
    Fixture f({}, "round_robin", {}, configure);
    auto typo = admin(f, "POST", "/admin/rollouts", R"({"name":"r","stable":"v1","candidate":"v3"})");
    ASSERT_FALSE(typo);
    EXPECT_EQ(typo.error().status, 400);
    EXPECT_NE(typo.error().body.find("no replica has version 'v3'"), std::string::npos) << typo.error().body;
    auto started = admin(f, "POST", "/admin/rollouts",
                         R"({"name":"r","stable":"v1","candidate":"v2","steps":[{"setWeight":30},{"pause":{}},{"setWeight":60},{"pause":{}}]})");
    ASSERT_TRUE(started) << started.error().message;
    EXPECT_EQ(started->status, 201);
    auto state = parse_json(started->body);
    ASSERT_TRUE(state);
    EXPECT_EQ((*state)["phase"], "paused");
    EXPECT_EQ((*state)["weight"], 30);
    auto again = admin(f, "POST", "/admin/rollouts", R"({"name":"r2","stable":"v1","candidate":"v2"})");
    ASSERT_FALSE(again);
    EXPECT_EQ(again.error().status, 409);
    first = route_sessions(f);
    int to_b = 0;
    for (int i = 0; i < 200; ++i) {
      const bool expected_b = assigned_to_candidate(fmt::format("s{}", i), 30);
      EXPECT_EQ(first[i] == on_b, expected_b) << i;
      to_b += first[i] == on_b;
    }
    EXPECT_GT(to_b, 30);
    EXPECT_LT(to_b, 90);
    EXPECT_EQ(route_sessions(f), first);  // sticky
    // Both versions answer clients: /v1/models lists both replicas' models.
    auto models = f.get("/v1/models");
    ASSERT_TRUE(models);
    EXPECT_EQ(models->body, R"({"object":"list","data":[{"id":"a"},{"id":"shared"},{"id":"b"}]})");
  }  // the router stops here
  {
    // Restarted without the candidate's replica: the rollout resumes, and says what is missing.
    ::testing::internal::CaptureStderr();
    Fixture f({}, "round_robin", {}, [&](RouterConfig& rc) {
      configure(rc);
      rc.backends.pop_back();
    });
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("resuming rollout 1 'r' (v1 -> v2) at step 1"), std::string::npos) << err;
    EXPECT_NE(err.find("warning: no replica has version 'v2' of rollout 1"), std::string::npos) << err;
    EXPECT_EQ(err.find("version 'v1'"), std::string::npos) << err;
  }
  Fixture f({}, "round_robin", {}, configure);
  auto listed = admin(f, "GET", "/admin/rollouts");
  ASSERT_TRUE(listed);
  auto current = parse_json(listed->body);
  ASSERT_TRUE(current);
  EXPECT_EQ((*current)["current"]["phase"], "paused") << listed->body;
  EXPECT_EQ((*current)["current"]["weight"], 30);
  EXPECT_EQ(route_sessions(f), first);  // the same sessions on the same versions after the restart
  // Resumed: the open-ended pause passes and the weight grows; no session leaves the candidate.
  auto resumed = admin(f, "POST", "/admin/rollouts/resume");
  ASSERT_TRUE(resumed) << resumed.error().message;
  EXPECT_EQ((*parse_json(resumed->body))["weight"], 60);
  const std::vector<std::string> at60 = route_sessions(f);
  for (int i = 0; i < 200; ++i) {
    if (first[i] == on_b) {
      EXPECT_EQ(at60[i], on_b) << i;
    }
  }
  auto aborted = admin(f, "POST", "/admin/rollouts/abort", R"({"reason":"TTFT p95 twice stable's"})");
  ASSERT_TRUE(aborted) << aborted.error().message;
  auto after = parse_json(aborted->body);
  EXPECT_EQ((*after)["phase"], "aborted");
  EXPECT_EQ((*after)["weight"], 0);
  const auto& decisions = (*after)["decisions"];
  ASSERT_GE(decisions.size(), 5u) << aborted->body;
  EXPECT_EQ(decisions[0]["action"], "start");
  EXPECT_EQ(decisions.back()["action"], "abort");
  EXPECT_EQ(decisions.back()["reason"], "TTFT p95 twice stable's");
  for (const std::string& answer : route_sessions(f)) EXPECT_EQ(answer, on_a);
  auto models = f.get("/v1/models");  // the candidate answers no one: not listed
  ASSERT_TRUE(models);
  EXPECT_EQ(models->body, R"({"object":"list","data":[{"id":"a"},{"id":"shared"}]})");
  auto late = admin(f, "POST", "/admin/rollouts/resume");
  ASSERT_FALSE(late);
  EXPECT_EQ(late.error().status, 409);
  auto nothing = admin(f, "POST", "/admin/rollouts/rewind");
  ASSERT_FALSE(nothing);
  EXPECT_EQ(nothing.error().status, 404);
  auto replicas = parse_json(admin(f, "GET", "/admin/replicas")->body);
  EXPECT_EQ((*replicas)["replicas"][1]["version"], "v2");
  const std::string m = f.router->metrics_text();
  EXPECT_NE(m.find(R"(sluice_router_rollout_weight_percent{rollout="r",stable="v1",candidate="v2",phase="aborted"} 0)"),
            std::string::npos) << m;
  EXPECT_NE(m.find("sluice_router_backend_info{backend=\"" + b.url().to_string() + "\",version=\"v2\"} 1"),
            std::string::npos);
  // Restarted after the abort: still everyone on stable (the store's latest rollout, aborted).
  ::testing::internal::CaptureStderr();
  Fixture again({}, "round_robin", {}, configure);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("rollout 1 'r' was aborted: every request goes to version 'v1'"), std::string::npos) << err;
  for (const std::string& answer : route_sessions(again)) EXPECT_EQ(answer, on_a);
  EXPECT_EQ((*parse_json(admin(again, "GET", "/admin/rollouts")->body))["current"]["phase"], "aborted");
}

// /v1/models after a promotion: the candidate's entries; with no replica of it available, requests
// fall back to the stable version, and so does the list (never an empty list while answering).
TEST(Router, ModelsFollowTheVersionThatAnswers) {
  TestHttpServer a(named("a")), b(named("b"));
  const std::string db = ::testing::TempDir() + "/router_models_promoted.db";
  std::filesystem::remove(db);
  Fixture f({}, "round_robin", {}, two_versions(a, b, db));
  auto started =
      admin(f, "POST", "/admin/rollouts", R"({"name":"r","stable":"v1","candidate":"v2","steps":[{"setWeight":100}]})");
  ASSERT_TRUE(started) << started.error().message;
  EXPECT_EQ((*parse_json(started->body))["phase"], "promoted") << started->body;
  auto models = f.get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->body, R"({"object":"list","data":[{"id":"b"},{"id":"shared"}]})");
  ASSERT_TRUE(
      admin(f, "POST", "/admin/replicas/drain", fmt::format(R"({{"url":"{}","drain":true}})", b.url().to_string())));
  auto answer = f.post("/v1/completions", R"({"prompt":"x"})");
  ASSERT_TRUE(answer) << answer.error().message;
  EXPECT_EQ(answer->body, R"({"replica":"a"})");
  models = f.get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->body, R"({"object":"list","data":[{"id":"a"},{"id":"shared"}]})");
}

// The analysis decides: an identical candidate passes its analysis step and is promoted; one
// that answers 500, or one that never answers (its clients give up), is rolled back by itself,
// with the reason.
TEST(Router, ARolloutIsPromotedOrRolledBackByItsAnalysis) {
  TestHttpServer stable(named("stable")), good(named("good"));
  TestHttpServer broken([](const ReceivedRequest& r, TestExchange& ex) -> net::awaitable<void> {
    if (r.target == "/health") {
      co_await ex.respond(200, R"({"status":"ok"})");
    } else {
      co_await ex.respond(500, R"({"error":{"message":"boom"}})");
    }
  });
  TestHttpServer hung([](const ReceivedRequest& r, TestExchange& ex) -> net::awaitable<void> {
    if (r.target != "/health") {
      net::steady_timer t(co_await net::this_coro::executor, 2s);
      co_await t.async_wait(net::use_awaitable);
    }
    co_await ex.respond(200, R"({"status":"ok"})");
  });
  for (const std::string candidate : {"good", "broken", "hung"}) {
    SCOPED_TRACE(candidate);
    const bool candidate_works = candidate == "good";
    const std::string db = ::testing::TempDir() + fmt::format("/router_analysis_{}.db", candidate);
    std::filesystem::remove(db);
    Fixture f({}, "round_robin", {}, [&](RouterConfig& rc) {
      rc.admin_key = "adm";
      rc.rollout_db = db;
      rc.max_attempts = 1;
      rc.backends.push_back(*parse_backend(stable.url().to_string() + ",version=v1"));
      const TestHttpServer& v2 = candidate == "good" ? good : candidate == "broken" ? broken : hung;
      rc.backends.push_back(*parse_backend(v2.url().to_string() + ",version=v2"));
    });
    auto started = admin(f, "POST", "/admin/rollouts",
                         R"({"name":"r","stable":"v1","candidate":"v2","steps":[{"setWeight":50},{"analysis":{}},)"
                         R"({"setWeight":100}],"analysis":{"interval":0.2,"minRequests":8,"failureLimit":0}})");
    ASSERT_TRUE(started) << started.error().message;
    nlohmann::ordered_json state;
    http::HttpOptions impatient;
    impatient.request_timeout = 200ms;
    for (int round = 0; round < 100; ++round) {
      for (int i = 0; i < 10; ++i) {
        http::fetch(f.url, {.method = "POST", .target = "/v1/completions",
                            .headers = {{"X-Session-ID", fmt::format("s{}", i)}}, .body = R"({"prompt":"x"})"},
                    impatient);
      }
      state = *parse_json(admin(f, "GET", "/admin/rollouts")->body);
      if (state["current"]["phase"] != "progressing") break;
      std::this_thread::sleep_for(50ms);
    }
    const auto& decisions = state["current"]["decisions"];
    if (candidate_works) {
      EXPECT_EQ(state["current"]["phase"], "promoted") << state.dump();
      EXPECT_EQ(decisions[decisions.size() - 2]["action"], "set weight");
      bool passed = false;
      for (const auto& d : decisions) passed = passed || d["action"] == "analysis passed";
      EXPECT_TRUE(passed) << state.dump();
      // /v1/models describes the version that answers now: the candidate's entries alone (its
      // context length and fingerprint), not the stable's first.
      auto models = f.get("/v1/models");
      ASSERT_TRUE(models);
      EXPECT_EQ(models->body, R"({"object":"list","data":[{"id":"good"},{"id":"shared"}]})");
    } else {
      EXPECT_EQ(state["current"]["phase"], "aborted") << state.dump();
      EXPECT_EQ(state["current"]["weight"], 0);
      EXPECT_EQ(decisions.back()["action"], "abort");
      EXPECT_NE(decisions.back()["reason"].get<std::string>().find("error rate 100.0% vs stable's 0.0%"),
                std::string::npos) << decisions.back().dump();
      // Everyone is back on stable.
      for (int i = 0; i < 10; ++i) {
        auto r = f.post("/v1/completions", R"({"prompt":"x"})", {{"X-Session-ID", fmt::format("s{}", i)}});
        ASSERT_TRUE(r) << r.error().message;
        EXPECT_EQ(r->body, R"({"replica":"stable"})");
      }
    }
    // The version that now answers every client cannot be shadowed: nothing would be copied to it.
    const std::string sole = candidate_works ? "v2" : "v1";
    auto shadowed = admin(f, "POST", "/admin/shadow", fmt::format(R"({{"version":"{}","fraction":1}})", sole));
    ASSERT_FALSE(shadowed);
    EXPECT_EQ(shadowed.error().status, 400);
    EXPECT_NE(shadowed.error().body.find("answers every client since the rollout ended"), std::string::npos)
        << shadowed.error().body;
  }
}

// While a version has no replica, the steps hold: the timed pause does not run out, and the
// candidate is not given more traffic (let alone promoted) until a replica of it is back. The
// analysis waits too (its requests went to stable: once counted as its errors, they aborted the
// rollout), and they go to the rollout's other version only, never to one outside it.
TEST(Router, ARolloutsStepsHoldWhileAVersionHasNoReplica) {
  TestHttpServer a(named("a")), b(named("b")), c(named("c"));
  const std::string db = ::testing::TempDir() + "/router_rollout_held.db";
  std::filesystem::remove(db);
  Fixture f({}, "round_robin", {}, [&](RouterConfig& rc) {
    two_versions(a, b, db)(rc);
    rc.backends.push_back(*parse_backend(c.url().to_string() + ",version=v3"));
  });
  auto started = admin(f, "POST", "/admin/rollouts",
                       R"({"name":"r","stable":"v1","candidate":"v2","steps":[{"setWeight":20},)"
                       R"({"pause":{"duration":1}},{"setWeight":50},{"pause":{}}],)"
                       R"("analysis":{"interval":0.1,"minRequests":2,"failureLimit":0}})");
  ASSERT_TRUE(started) << started.error().message;
  const std::string b_url = b.url().to_string();
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(admin(f, "POST", "/admin/replicas/remove", fmt::format(R"({{"url":"{}"}})", b_url)));
  auto current = [&] { return (*parse_json(admin(f, "GET", "/admin/rollouts")->body))["current"]; };
  Json state;
  for (int i = 0; i < 250 && !(state = current()).contains("held_for_version"); ++i) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(state.value("held_for_version", ""), "v2") << state.dump();
  // Sessions of both versions, over several analysis intervals: every one answered by stable.
  for (int i = 0; i < 40; ++i) {
    auto r = f.post("/v1/completions", R"({"prompt":"x"})", {{"X-Session-ID", fmt::format("s{}", i)}});
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->body, R"({"replica":"a"})") << i;
    std::this_thread::sleep_for(30ms);
  }
  state = current();  // past the 1 s pause: held all the same
  EXPECT_EQ(state["phase"], "progressing") << state.dump();
  EXPECT_EQ(state["step"], 1) << state.dump();
  EXPECT_EQ(state["weight"], 20) << state.dump();
  ASSERT_TRUE(admin(f, "POST", "/admin/replicas", fmt::format(R"({{"url":"{}","version":"v2"}})", b_url)));
  // The pause runs out what it had left, then the steps go on.
  for (int i = 0; i < 250 && (state = current())["phase"] != "paused"; ++i) std::this_thread::sleep_for(20ms);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(state["phase"], "paused") << state.dump();  // the open-ended pause after setWeight 50
  EXPECT_EQ(state["weight"], 50) << state.dump();
  EXPECT_FALSE(state.contains("held_for_version")) << state.dump();
  EXPECT_NE(err.find("rollout 1 'r' holds at step 1: no replica takes version 'v2'; its steps wait until one does"),
            std::string::npos) << err;
  EXPECT_NE(err.find("rollout 1 'r': every version has a replica again; its steps go on"), std::string::npos) << err;
  EXPECT_EQ(err.find("analysis failed"), std::string::npos) << err;
}

// Two router instances: one runs the rollout, the other follows it; both send every session
// to the same version, and follow an abort.
TEST(Router, AFollowerSplitsTrafficAsItsControllerDoes) {
  TestHttpServer a(named("a")), b(named("b"));
  const std::string db = ::testing::TempDir() + "/router_controller.db";
  std::filesystem::remove(db);
  auto replicas = [&](RouterConfig& rc) {
    rc.admin_key = "adm";
    rc.backends.push_back(*parse_backend(a.url().to_string() + ",version=v1"));
    rc.backends.push_back(*parse_backend(b.url().to_string() + ",version=v2"));
  };
  Fixture controller({}, "round_robin", {}, [&](RouterConfig& rc) {
    replicas(rc);
    rc.rollout_db = db;
  });
  Fixture follower({}, "round_robin", {}, [&](RouterConfig& rc) {
    replicas(rc);
    rc.follow_url = controller.url.to_string();
    rc.follow_interval_seconds = 0.05;
  });
  auto started = admin(controller, "POST", "/admin/rollouts",
                       R"({"name":"r","stable":"v1","candidate":"v2","steps":[{"setWeight":35},{"pause":{}}]})");
  ASSERT_TRUE(started) << started.error().message;
  auto weight_on = [&](Fixture& f) {
    auto r = admin(f, "GET", "/admin/rollouts");
    if (!r) return -1.0;
    auto j = parse_json(r->body);
    return (*j)["current"].is_null() ? -1.0 : (*j)["current"]["weight"].get<double>();
  };
  auto phase_on = [&](Fixture& f) { return (*parse_json(admin(f, "GET", "/admin/rollouts")->body))["current"]["phase"]; };
  for (int i = 0; i < 200 && weight_on(follower) != 35; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(weight_on(follower), 35);
  auto answers_of = [](Fixture& f) {
    std::vector<std::string> out;
    for (int i = 0; i < 60; ++i) {
      auto r = f.post("/v1/completions", R"({"prompt":"x"})", {{"X-Session-ID", fmt::format("s{}", i)}});
      out.push_back(r ? r->body : "");
    }
    return out;
  };
  const std::vector<std::string> on_controller = answers_of(controller);
  EXPECT_EQ(answers_of(follower), on_controller);
  EXPECT_NE(std::count(on_controller.begin(), on_controller.end(), R"({"replica":"b"})"), 0);
  // A follower does not take rollout commands.
  auto refused = admin(follower, "POST", "/admin/rollouts/abort");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().status, 409);
  ASSERT_TRUE(admin(controller, "POST", "/admin/rollouts/abort"));
  for (int i = 0; i < 200 && phase_on(follower) != "aborted"; ++i) std::this_thread::sleep_for(10ms);
  for (const std::string& answer : answers_of(follower)) EXPECT_EQ(answer, R"({"replica":"a"})");
  // --follow and --rollout-db together are refused.
  RouterConfig both;
  replicas(both);
  both.rollout_db = db;
  both.follow_url = controller.url.to_string();
  EXPECT_FALSE(Router::create(both));
}

// Before its first step a rollout sends the candidate the prompt prefixes the traffic shares
// most, one short request each, and only then moves the weight.
TEST(Router, ARolloutWarmsTheCandidateWithTheHottestPrefixesFirst) {
  std::mutex mu;
  std::vector<std::string> warmed;  // bodies b got
  TestHttpServer a(named("a"));
  TestHttpServer b([&](const ReceivedRequest& r, TestExchange& ex) -> net::awaitable<void> {
    if (r.target != "/health") {
      std::lock_guard lock(mu);
      warmed.push_back(r.body);
    }
    co_await ex.respond(200, R"({"replica":"b"})");
  });
  const std::string db = ::testing::TempDir() + "/router_warm.db";
  std::filesystem::remove(db);
  Fixture f({}, "round_robin", {}, [&](RouterConfig& rc) {
    rc.admin_key = "adm";
    rc.rollout_db = db;
    rc.backends.push_back(*parse_backend(a.url().to_string() + ",version=v1"));
    rc.backends.push_back(*parse_backend(b.url().to_string() + ",version=v2"));
  });
  const std::string system = "You are the support assistant of a bicycle shop; answer briefly and kindly. ";
  for (int i = 0; i < 6; ++i) {
    Json body = {{"messages", Json::array({{{"role", "system"}, {"content", system}},
                                           {{"role", "user"}, {"content", fmt::format("question {}", i)}}})},
                 {"max_tokens", 50},
                 {"stream", true}};
    ASSERT_TRUE(f.post("/v1/chat/completions", body.dump()));
  }
  ASSERT_TRUE(f.post("/v1/completions", R"({"prompt":"a one-off prompt that nobody else sends, long enough"})"));
  size_t before = 0;  // what b answered while every replica served
  {
    std::lock_guard lock(mu);
    before = warmed.size();
  }
  auto started = admin(f, "POST", "/admin/rollouts",
                       R"({"name":"w","stable":"v1","candidate":"v2","steps":[{"setWeight":50},{"pause":{}}]})");
  ASSERT_TRUE(started) << started.error().message;
  Json state;
  for (int i = 0; i < 500; ++i) {
    state = (*parse_json(admin(f, "GET", "/admin/rollouts")->body))["current"];
    if (state["weight"] == 50) break;
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_EQ(state["weight"], 50) << state.dump();
  const Json& decisions = state["decisions"];
  ASSERT_GE(decisions.size(), 3u);
  EXPECT_EQ(decisions[0]["action"], "start");
  EXPECT_EQ(decisions[1]["action"], "warm");
  EXPECT_NE(decisions[1]["reason"].get<std::string>().find("the 1 hottest prompt prefixes (shared by 6 to 6 requests) "
                                                            "sent to 1 replica of v2: 1 of 1 answered"),
            std::string::npos)
      << decisions[1].dump();
  EXPECT_EQ(decisions[2]["action"], "set weight");
  std::lock_guard lock(mu);
  ASSERT_EQ(warmed.size(), before + 1);  // no client request reached it since
  auto sent = parse_json(warmed.back());
  ASSERT_TRUE(sent);
  EXPECT_EQ((*sent)["max_tokens"], 1);
  EXPECT_EQ((*sent)["stream"], false);
  EXPECT_EQ((*sent)["messages"][0]["content"], system);
}

// A rollout with an eval suite runs it (through the router's eval gate) against one replica of
// each version at each analysis step: a suite that regressed rolls the candidate back with its
// reason; one that held promotes it. Without a gate such rollouts are refused.
TEST(Router, ARolloutsEvalSuiteGatesItsAnalysisSteps) {
  TestHttpServer a(named("a")), b(named("b"));
  const std::string suite = ::testing::TempDir() + "/rollout_suite.yaml";
  { std::ofstream(suite) << "providers: []\n"; }
  for (bool regressed : {false, true}) {
    const std::string db = ::testing::TempDir() + fmt::format("/router_eval_{}.db", regressed);
    std::filesystem::remove(db);
    std::mutex mu;
    std::vector<std::string> called;  // suite, URLs, max drop, keys
    Fixture f({}, "round_robin", {}, [&](RouterConfig& rc) {
      rc.admin_key = "adm";
      rc.rollout_db = db;
      rc.backends.push_back(*parse_backend(a.url().to_string() + ",version=v1"));
      rc.backends.push_back(*parse_backend(b.url().to_string() + ",version=v2,key=kb"));
      rc.eval_gate = [&, regressed](const std::string& s, double max_drop, const EvalEndpoint& stable,
                                    const EvalEndpoint& candidate) -> Result<EvalVerdict> {
        std::lock_guard lock(mu);
        called = {s, stable.url, candidate.url, fmt::format("{}", max_drop), stable.api_key, candidate.api_key};
        return EvalVerdict{!regressed, regressed ? "regressed over 3 items" : "no change over 3 items", {}};
      };
    });
    auto missing = admin(f, "POST", "/admin/rollouts", R"({"name":"e","stable":"v1","candidate":"v2",
        "analysis":{"evalSuite":"/no/such/suite.yaml"}})");
    ASSERT_FALSE(missing);
    EXPECT_NE(missing.error().body.find("no file '/no/such/suite.yaml'"), std::string::npos) << missing.error().body;
    Json spec = Json::parse(R"({"name":"e","stable":"v1","candidate":"v2",
        "steps":[{"setWeight":50},{"analysis":{}},{"setWeight":100}],
        "analysis":{"interval":0.05,"minRequests":2,"failureLimit":0,"evalMaxDrop":0.1}})");
    spec["analysis"]["evalSuite"] = suite;
    ASSERT_TRUE(admin(f, "POST", "/admin/rollouts", spec.dump()));
    Json state;
    for (int i = 0; i < 400; ++i) {
      ASSERT_TRUE(f.post("/v1/completions", R"({"prompt":"x"})", {{"X-Session-ID", fmt::format("s{}", i)}}));
      state = (*parse_json(admin(f, "GET", "/admin/rollouts")->body))["current"];
      if (state["phase"] == "promoted" || state["phase"] == "aborted") break;
      std::this_thread::sleep_for(5ms);
    }
    EXPECT_EQ(state["phase"], regressed ? "aborted" : "promoted") << state.dump();
    bool eval_decided = false;
    for (const Json& d : state["decisions"]) {
      const std::string reason = d["reason"].get<std::string>();
      if (reason.starts_with("eval " + suite)) eval_decided = d["action"] == (regressed ? "analysis failed" : "eval passed");
    }
    EXPECT_TRUE(eval_decided) << state.dump();
    std::lock_guard lock(mu);
    ASSERT_EQ(called.size(), 6u);
    EXPECT_EQ(called[0], suite);
    EXPECT_EQ(called[1], a.url().to_string() + "/v1");
    EXPECT_EQ(called[2], b.url().to_string() + "/v1");
    EXPECT_EQ(called[3], "0.1");
    EXPECT_EQ(called[4], "");    // each replica's own key
    EXPECT_EQ(called[5], "kb");
  }
  Fixture bare({}, "round_robin", {}, [&](RouterConfig& rc) {
    rc.admin_key = "adm";
    rc.rollout_db = ::testing::TempDir() + "/router_eval_none.db";
    rc.backends.push_back(*parse_backend(a.url().to_string() + ",version=v1"));
    rc.backends.push_back(*parse_backend(b.url().to_string() + ",version=v2"));
  });
  Json spec = Json::parse(R"({"name":"e","stable":"v1","candidate":"v2"})");
  spec["analysis"]["evalSuite"] = suite;
  auto refused = admin(bare, "POST", "/admin/rollouts", spec.dump());
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().body.find("cannot run eval suites"), std::string::npos) << refused.error().body;
}

// A replica without a version label is labelled by the model id and system_fingerprint it
// reports; a label given by the flag is kept.
TEST(Router, UnlabelledReplicasAreLabelledByWhatTheyReport) {
  // The /v1/models answer is made before the handler (g++ 12 and braced temporaries in co_await).
  auto reporting = [](const std::string& id, const std::string& fingerprint) -> TestHttpServer::Handler {
    Json m = Json::object();
    m["id"] = id;
    if (!fingerprint.empty()) m["system_fingerprint"] = fingerprint;
    Json list = Json::object();
    list["data"] = Json::array();
    list["data"].push_back(m);
    const std::string models = list.dump();
    return [models](const ReceivedRequest& r, TestExchange& ex) -> net::awaitable<void> {
      const std::string body = r.target == "/v1/models" ? models : std::string(R"({"status":"ok"})");
      co_await ex.respond(200, body);
    };
  };
  TestHttpServer a(reporting("qwen", "fp_1")), b(reporting("qwen", "")), c(reporting("qwen", "fp_2"));
  Fixture f({}, "round_robin", {}, [&](RouterConfig& rc) {
    rc.admin_key = "adm";
    rc.learn_versions = true;
    rc.backends.push_back(*parse_backend(a.url().to_string()));
    rc.backends.push_back(*parse_backend(b.url().to_string()));
    rc.backends.push_back(*parse_backend(c.url().to_string() + ",version=canary"));
  });
  Json replicas;
  for (int i = 0; i < 500; ++i) {
    replicas = (*parse_json(admin(f, "GET", "/admin/replicas")->body))["replicas"];
    if (replicas[0]["version"] != "" && replicas[1]["version"] != "") break;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(replicas[0]["version"], "qwen@fp_1") << replicas.dump();
  EXPECT_EQ(replicas[1]["version"], "qwen");
  EXPECT_EQ(replicas[2]["version"], "canary");
}

}  // namespace
}  // namespace sluice::router
