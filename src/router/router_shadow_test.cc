// Shadow traffic in the router over scripted replicas: copies never answered, compared and
// reported; a slow or dead shadow never holding up a primary; overflow dropped and counted; a
// rollout's analysis rolling back a candidate whose answers differ.
#include "router/router_test_fixture.h"

#include <mutex>

namespace sluice::router {
namespace {

using namespace router_testing;
using Json = nlohmann::ordered_json;

// A replica answering every completion with `text` (streamed when asked), after `gate` opens
// when there is one. Bodies it received are kept in `bodies`.
struct Scripted {
  explicit Scripted(std::string text, bool gated = false) : text(std::move(text)), open(!gated) {}
  TestHttpServer::Handler handler() {
    return [this](const ReceivedRequest& r, TestExchange& ex) -> net::awaitable<void> {
      if (r.target == "/health") {
        co_await ex.respond(200, R"({"status":"ok"})");
        co_return;
      }
      {
        std::lock_guard lock(mu);
        bodies.push_back(r.body);
      }
      for (int i = 0; i < 1000 && !open.load(); ++i) co_await ex.sleep(10ms);
      if (r.body.find("\"stream\":true") != std::string::npos) {
        co_await ex.begin_chunked(200, "text/event-stream");
        co_await ex.chunk(R"(data: {"choices":[{"index":0,"text":")" + text + R"("}]})" "\n\n");
        co_await ex.chunk(R"(data: {"choices":[{"index":0,"text":"","finish_reason":"stop"}]})" "\n\ndata: [DONE]\n\n");
        co_await ex.end_chunked();
        co_return;
      }
      co_await ex.respond(200, R"({"choices":[{"index":0,"text":")" + text + R"(","finish_reason":"stop"}]})");
    };
  }
  std::vector<std::string> received() {
    std::lock_guard lock(mu);
    return bodies;
  }
  std::string text;
  std::atomic<bool> open;
  std::mutex mu;
  std::vector<std::string> bodies;
};

void with_versions(RouterConfig& rc, std::vector<std::pair<const TestHttpServer*, std::string>> replicas) {
  rc.admin_key = "adm";
  for (const auto& [server, version] : replicas) {
    rc.backends.push_back(*parse_backend(server->url().to_string() + ",version=" + version));
  }
}

Json report_of(const Fixture& f) {
  auto r = admin(f, "GET", "/admin/shadow/report?worst=2");
  EXPECT_TRUE(r) << r.error().message;
  if (!r) return Json();
  auto j = parse_json(r->body);
  return j ? *j : Json();
}

TEST(RouterShadow, CopiesAreComparedAndNeverAnswered) {
  Scripted stable_text("the stable answer"), candidate_text("a candidate answer");
  TestHttpServer a(stable_text.handler()), b(candidate_text.handler());
  Fixture f({}, "round_robin", {}, [&](RouterConfig& rc) {
    with_versions(rc, {{&a, "v1"}, {&b, "v2"}});
    rc.shadow = {.version = "v2", .fraction = 1};
  });
  const std::string plain = R"({"prompt":"hello","max_tokens":4,"temperature":0})";
  const std::string streamed = R"({"prompt":"hello","max_tokens":4,"temperature":0,"stream":true})";
  // What the stable replica answers, asked directly.
  auto direct_plain = http::fetch(a.url(), http::HttpRequest{.method = "POST", .target = "/v1/completions", .body = plain});
  auto direct_stream = http::fetch(a.url(), http::HttpRequest{.method = "POST", .target = "/v1/completions", .body = streamed});
  ASSERT_TRUE(direct_plain && direct_stream);
  for (int i = 0; i < 8; ++i) {
    auto r = f.post("/v1/completions", i % 2 ? streamed : plain);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->body, (i % 2 ? direct_stream : direct_plain)->body) << i;  // byte for byte the primary's
    EXPECT_EQ(r->header("X-Sluice-Replica"), a.url().to_string());
  }
  metrics_with(f, R"(sluice_router_shadow_pairs_total{arm="candidate",result="disagree"} 8)");
  const Json r = report_of(f);
  const Json& cand = r["arms"]["candidate"];
  EXPECT_EQ(cand["pairs"], 8) << r.dump();
  EXPECT_EQ(cand["exact_match_rate"], 0.0);
  EXPECT_EQ(cand["disagreement_rate"], 1.0);
  EXPECT_EQ(cand["first_diff_token"]["histogram"][0]["pairs"], 0);  // the candidate returned no logprobs here
  ASSERT_EQ(r["worst"].size(), 2u);
  EXPECT_EQ(r["worst"][0]["primary"]["text"], "the stable answer");
  EXPECT_EQ(r["worst"][0]["shadow"]["text"], "a candidate answer");
  EXPECT_EQ(r["worst"][0]["shadow_replica"], b.url().to_string());
  // The copies went out whole (not streamed) and asked for logprobs; the stable replica got
  // each request once.
  const auto copies = candidate_text.received();
  ASSERT_EQ(copies.size(), 8u);
  for (const std::string& body : copies) {
    auto j = parse_json(body);
    ASSERT_TRUE(j);
    EXPECT_EQ((*j)["stream"], false);
    EXPECT_EQ((*j)["logprobs"], 0);
    EXPECT_FALSE(j->contains("stream_options"));
  }
  EXPECT_EQ(stable_text.received().size(), 10u);  // 8 + the 2 direct
}

TEST(RouterShadow, AnIdenticalShadowAgreesEverywhereAndTheNoiseFloorIsZero) {
  Scripted one("same words"), two("same words"), three("same words");
  TestHttpServer a(one.handler()), a2(two.handler()), b(three.handler());
  Fixture f({}, "round_robin", {}, [&](RouterConfig& rc) {
    with_versions(rc, {{&a, "v1"}, {&a2, "v1"}, {&b, "v2"}});
    rc.shadow = {.version = "v2", .fraction = 1, .noise_fraction = 1};
  });
  for (int i = 0; i < 10; ++i) {
    auto r = f.post("/v1/completions", R"({"prompt":"p","temperature":0})");
    ASSERT_TRUE(r) << r.error().message;
  }
  metrics_with(f, R"(sluice_router_shadow_pairs_total{arm="noise",result="agree"} 10)");
  metrics_with(f, R"(sluice_router_shadow_pairs_total{arm="candidate",result="agree"} 10)");
  const Json r = report_of(f);
  EXPECT_EQ(r["arms"]["candidate"]["exact_match_rate"], 1.0) << r.dump();
  EXPECT_EQ(r["arms"]["noise"]["exact_match_rate"], 1.0);
  EXPECT_EQ(r["excess_disagreement"], 0.0);
  EXPECT_TRUE(r["worst"].empty());
  // The noise copy went to the other v1 replica, never the primary's own.
  EXPECT_EQ(one.received().size() + two.received().size(), 20u);
  EXPECT_EQ(three.received().size(), 10u);
}

// A shadow that does not answer holds up no primary: each client has its answer while the
// copies wait, and past max_in_flight new copies are dropped, never queued.
TEST(RouterShadow, ASlowShadowHoldsUpNoPrimaryAndOverflowIsDroppedAndCounted) {
  Scripted stable_text("fast"), slow_text("slow", /*gated=*/true);
  TestHttpServer a(stable_text.handler()), b(slow_text.handler());
  Fixture f({}, "round_robin", {}, [&](RouterConfig& rc) {
    with_versions(rc, {{&a, "v1"}, {&b, "v2"}});
    rc.shadow = {.version = "v2", .fraction = 1, .max_in_flight = 2};
  });
  for (int i = 0; i < 6; ++i) {
    auto r = f.post("/v1/completions", R"({"prompt":"p","temperature":0})");
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_NE(r->body.find("fast"), std::string::npos);
  }
  // All six answered while the two copies sent still wait on the shadow replica.
  std::string m = f.router->metrics_text();
  EXPECT_NE(m.find("sluice_router_shadow_in_flight 2\n"), std::string::npos) << m;
  EXPECT_NE(m.find(R"(sluice_router_shadow_dropped_total{reason="overflow"} 4)"), std::string::npos) << m;
  slow_text.open = true;
  m = metrics_with(f, R"(sluice_router_shadow_pairs_total{arm="candidate",result="disagree"} 2)");
  EXPECT_NE(m.find(R"(sluice_router_shadow_pairs_total{arm="candidate",result="disagree"} 2)"), std::string::npos) << m;
  EXPECT_EQ(slow_text.received().size(), 2u);
}

TEST(RouterShadow, ADeadShadowCostsThePrimaryNothing) {
  Scripted stable_text("alive");
  TestHttpServer a(stable_text.handler());
  Fixture f({}, "round_robin", {}, [&](RouterConfig& rc) {
    rc.admin_key = "adm";
    rc.backends.push_back(*parse_backend(a.url().to_string() + ",version=v1"));
    rc.backends.push_back(*parse_backend(dead_url().to_string() + ",version=v2"));
    rc.shadow = {.version = "v2", .fraction = 1, .timeout_seconds = 2};
  });
  for (int i = 0; i < 6; ++i) {
    auto r = f.post("/v1/completions", R"({"prompt":"p","temperature":0})");
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_NE(r->body.find("alive"), std::string::npos);
  }
  // Each copy failed to connect (a shadow error) or found the replica ejected (no replica).
  int64_t accounted = 0;
  for (int i = 0; i < 500 && accounted < 6; ++i) {
    auto status = parse_json(admin(f, "GET", "/admin/shadow")->body);
    accounted = (*status)["pairs"].value("candidate", Json::object()).value("shadow_error", int64_t{0}) +
                (*status)["dropped"].value("no_replica", int64_t{0});
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(accounted, 6);
}

// /health counts the replicas that answer clients: with its primaries drained, a router whose
// only replica left is the shadow's answers 503 to every request, and says so.
TEST(RouterShadow, HealthDoesNotCountTheShadowsReplicas) {
  Scripted one("x"), two("y");
  TestHttpServer a(one.handler()), b(two.handler());
  Fixture f({}, "round_robin", {}, [&](RouterConfig& rc) {
    rc.admin_key = "adm";
    rc.backends.push_back(*parse_backend(a.url().to_string() + ",version=v1"));
    rc.backends.push_back(*parse_backend(b.url().to_string() + ",version=v2"));
    rc.shadow = {.version = "v2", .fraction = 1, .timeout_seconds = 2};
  });
  auto health = f.get("/health");
  ASSERT_TRUE(health) << health.error().message;
  EXPECT_NE(health->body.find("\"replicas_available\":1"), std::string::npos) << health->body;
  ASSERT_TRUE(admin(f, "POST", "/admin/replicas/drain", R"({"url":")" + a.url().to_string() + R"("})"));
  health = f.get("/health");
  ASSERT_FALSE(health);
  EXPECT_NE(health.error().message.find("HTTP 503"), std::string::npos) << health.error().message;
  EXPECT_FALSE(f.post("/v1/completions", R"({"prompt":"p"})"));
}

TEST(RouterShadow, TheAdminApiSetsTheShadowAndRefusesAVersionNoReplicaHas) {
  Scripted one("x"), two("y");
  TestHttpServer a(one.handler()), b(two.handler());
  const std::string db = ::testing::TempDir() + "/router_shadow_admin.db";
  std::filesystem::remove(db);
  Fixture f({}, "round_robin", {}, [&](RouterConfig& rc) {
    with_versions(rc, {{&a, "v1"}, {&b, "v2"}});
    rc.rollout_db = db;
  });
  auto off = parse_json(admin(f, "GET", "/admin/shadow")->body);
  EXPECT_TRUE((*off)["active"].is_null());
  auto typo = admin(f, "POST", "/admin/shadow", R"({"version":"v3","fraction":1})");
  ASSERT_FALSE(typo);
  EXPECT_EQ(typo.error().status, 400);
  EXPECT_NE(typo.error().body.find("no replica has version 'v3'"), std::string::npos);
  auto bad = admin(f, "POST", "/admin/shadow", R"({"version":"v2","fraction":1.5})");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().body.find("fraction must be a number in [0, 1]"), std::string::npos) << bad.error().body;
  // One replica of each version: a noise arm would have nowhere to go.
  auto lone = admin(f, "POST", "/admin/shadow", R"({"version":"v2","fraction":1,"noiseFraction":0.5})");
  ASSERT_FALSE(lone);
  EXPECT_EQ(lone.error().status, 400);
  EXPECT_NE(lone.error().body.find("no version has two replicas"), std::string::npos) << lone.error().body;
  auto lone_rollout = admin(f, "POST", "/admin/rollouts", R"({"name":"n","stable":"v1","candidate":"v2",
      "steps":[{"setWeight":100}],"shadow":{"fraction":1,"noiseFraction":0.5}})");
  ASSERT_FALSE(lone_rollout);
  EXPECT_EQ(lone_rollout.error().status, 400);
  EXPECT_NE(lone_rollout.error().body.find("second replica of the stable version 'v1', which has 1"),
            std::string::npos)
      << lone_rollout.error().body;
  auto set = admin(f, "POST", "/admin/shadow", R"({"version":"v2","fraction":1})");
  ASSERT_TRUE(set) << set.error().message;
  EXPECT_EQ((*parse_json(set->body))["source"], "router");
  ASSERT_TRUE(f.post("/v1/completions", R"({"prompt":"p","temperature":0})"));
  metrics_with(f, R"(sluice_router_shadow_pairs_total{arm="candidate",result="disagree"} 1)");
  EXPECT_EQ(two.received().size(), 1u);
  // Each query value is read whole or refused, never taken as 0.
  for (const char* query : {"worst=-1", "since=abc&worst=5", "worst=5x", "worst=2.5", "bucket=0", "bucket=nan",
                            "since=inf"}) {
    auto report = admin(f, "GET", fmt::format("/admin/shadow/report?{}", query));
    ASSERT_FALSE(report) << query;
    EXPECT_EQ(report.error().status, 400) << query;
  }
  auto good = admin(f, "GET", "/admin/shadow/report?since=0&worst=3&bucket=60&version=v2");
  ASSERT_TRUE(good) << good.error().message;
  auto unauthorized = admin(f, "GET", "/admin/shadow/report", "", "wrong");
  ASSERT_FALSE(unauthorized);
  EXPECT_EQ(unauthorized.error().status, 401);
  // The same check at start (sluice route --shadow-noise), where every replica is labelled.
  RouterConfig noisy;
  with_versions(noisy, {{&a, "v1"}, {&b, "v2"}});
  noisy.shadow = {.version = "v2", .fraction = 1, .noise_fraction = 0.5};
  auto refused = Router::create(noisy);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("no version has two replicas"), std::string::npos)
      << refused.error().message();
  // Shadowing the only version there is would leave no replica to answer clients.
  RouterConfig only_v1;
  with_versions(only_v1, {{&a, "v1"}, {&b, "v1"}});
  only_v1.shadow = {.version = "v1", .fraction = 0.5};
  auto none_left = Router::create(only_v1);
  ASSERT_FALSE(none_left);
  EXPECT_NE(none_left.error().message().find("every replica has that version"), std::string::npos)
      << none_left.error().message();
  Fixture g({}, "round_robin", {}, [&](RouterConfig& rc) { with_versions(rc, {{&a, "v1"}, {&b, "v1"}}); });
  auto all = admin(g, "POST", "/admin/shadow", R"({"version":"v1","fraction":0.5})");
  ASSERT_FALSE(all);
  EXPECT_EQ(all.error().status, 400);
  EXPECT_NE(all.error().body.find("every replica has version 'v1'"), std::string::npos) << all.error().body;
  ASSERT_TRUE(g.post("/v1/completions", R"({"prompt":"p"})"));
}

// A router destroyed while a primary still waits (past the drain) after its copy has answered:
// the abandoned request is destroyed with the router without telling a shadow thread that is
// gone (under ASan this was a use after free of shadow_ioc's scheduler).
TEST(RouterShadow, ARouterDestroyedWithAPrimaryPendingAfterItsCopyAnswered) {
  Scripted stable_text("slow", /*gated=*/true), candidate_text("quick");
  TestHttpServer a(stable_text.handler()), b(candidate_text.handler());
  auto f = std::make_unique<Fixture>(std::vector<TestHttpServer*>{}, "round_robin", std::vector<http::Url>{},
                                     [&](RouterConfig& rc) {
                                       with_versions(rc, {{&a, "v1"}, {&b, "v2"}});
                                       rc.shadow = {.version = "v2", .fraction = 1};
                                     });
  std::thread client([url = f->url] {
    http::HttpRequest r{.method = "POST", .target = "/v1/completions", .body = R"({"prompt":"p","stream":true})"};
    (void)http::fetch(url, r);  // answered, or cut off when the router goes
  });
  for (int i = 0; i < 500 && candidate_text.received().empty(); ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(candidate_text.received().size(), 1u);
  for (int i = 0; i < 500; ++i) {
    auto status = admin(*f, "GET", "/admin/shadow");
    if (status && (*parse_json(status->body))["in_flight"] == 0) break;
    std::this_thread::sleep_for(10ms);
  }
  std::this_thread::sleep_for(50ms);  // the copy's answer is recorded just after in_flight drops
  f.reset();  // drains for 1 s, then abandons the primary
  stable_text.open = true;
  client.join();
}

// A rollout with a shadow judges the candidate's quality by the comparisons: one whose answers
// differ is rolled back with that reason; an identical one is promoted.
TEST(RouterShadow, ARolloutIsRolledBackWhenItsShadowAnswersDiffer) {
  for (bool same : {true, false}) {
    Scripted one("stable words"), two("stable words"), three(same ? "stable words" : "other words");
    TestHttpServer a(one.handler()), a2(two.handler()), b(three.handler());
    const std::string db = ::testing::TempDir() + fmt::format("/router_shadow_rollout_{}.db", same);
    std::filesystem::remove(db);
    Fixture f({}, "round_robin", {}, [&](RouterConfig& rc) {
      with_versions(rc, {{&a, "v1"}, {&a2, "v1"}, {&b, "v2"}});
      rc.rollout_db = db;
    });
    auto started = admin(f, "POST", "/admin/rollouts", R"({"name":"q","stable":"v1","candidate":"v2",
        "steps":[{"setWeight":20},{"analysis":{}},{"setWeight":100}],
        "analysis":{"interval":0.1,"minRequests":3,"failureLimit":0,"minShadowPairs":5},
        "shadow":{"fraction":1,"noiseFraction":0.5}})");
    ASSERT_TRUE(started) << started.error().message;
    std::string phase;
    for (int i = 0; i < 600 && (phase.empty() || phase == "progressing" || phase == "paused"); ++i) {
      auto r = f.post("/v1/completions", R"({"prompt":"p","temperature":0})", {{"X-Session-ID", fmt::format("s{}", i)}});
      ASSERT_TRUE(r) << r.error().message;
      if (i % 10 == 9) {
        std::this_thread::sleep_for(30ms);
        phase = (*parse_json(admin(f, "GET", "/admin/rollouts")->body))["current"]["phase"].get<std::string>();
      }
    }
    auto current = (*parse_json(admin(f, "GET", "/admin/rollouts")->body))["current"];
    EXPECT_EQ(current["phase"], same ? "promoted" : "aborted") << current.dump();
    if (!same) {
      EXPECT_EQ(current["decisions"].back()["action"], "abort");
      EXPECT_NE(current["decisions"].back()["reason"].get<std::string>().find("shadow disagreement 100.0%"),
                std::string::npos)
          << current.dump();
    }
    // The shadow stops with the rollout.
    EXPECT_TRUE((*parse_json(admin(f, "GET", "/admin/shadow")->body))["active"].is_null());
  }
}

}  // namespace
}  // namespace sluice::router
