// The rollout store under the router: writes it refused kept and written once it takes them
// again, and what is missing said when the router stops.
#include "router/router_test_fixture.h"

#include <optional>

#include <sqlite3.h>

namespace sluice::router {
namespace {

using namespace router_testing;
using Json = nlohmann::ordered_json;

// The store refusing writes (another process holds its write lock) loses nothing: the rollout
// goes on in memory, its abort is written with every decision and analysis once the lock is
// gone, and no new rollout starts before that. (The writes happen outside the lock that routing
// takes: write_rollout_store's SLUICE_EXCLUDES, checked by `make check-clang`.)
TEST(Router, WhatTheRolloutStoreRefusedIsWrittenOnceItTakesWritesAgain) {
  TestHttpServer stable(named("stable"));
  TestHttpServer broken([](const ReceivedRequest& r, TestExchange& ex) -> net::awaitable<void> {
    co_await ex.respond(r.target == "/health" ? 200 : 500, r.target == "/health" ? R"({"status":"ok"})" : "{}");
  });
  const std::string db = ::testing::TempDir() + "/router_store_locked.db";
  std::filesystem::remove(db);
  Fixture f({}, "round_robin", {}, [&](RouterConfig& rc) {
    rc.admin_key = "adm";
    rc.rollout_db = db;
    rc.max_attempts = 1;
    rc.backends.push_back(*parse_backend(stable.url().to_string() + ",version=v1"));
    rc.backends.push_back(*parse_backend(broken.url().to_string() + ",version=v2"));
  });
  const std::string spec = R"({"name":"r","stable":"v1","candidate":"v2","steps":[{"setWeight":50},{"analysis":{}}],)"
                           R"("analysis":{"interval":0.2,"minRequests":8,"failureLimit":0}})";
  ASSERT_TRUE(admin(f, "POST", "/admin/rollouts", spec));
  sqlite3* lock = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &lock), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(lock, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  auto stored = [&](const char* sql) {
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(lock, sql, -1, &st, nullptr), SQLITE_OK) << sqlite3_errmsg(lock);
    std::string out;
    while (sqlite3_step(st) == SQLITE_ROW) out += std::string(reinterpret_cast<const char*>(sqlite3_column_text(st, 0))) + ";";
    sqlite3_finalize(st);
    return out;
  };
  const std::string phase_sql = "SELECT phase FROM rollouts ORDER BY id DESC LIMIT 1";
  const std::string actions_sql = "SELECT action FROM decisions ORDER BY rowid";
  const std::string analyses_sql = "SELECT reason FROM analyses ORDER BY rowid";
  const std::string phase_before = stored(phase_sql.c_str()), actions_before = stored(actions_sql.c_str());
  const std::string analyses_before = stored(analyses_sql.c_str());
  Json state;
  for (int round = 0; round < 100; ++round) {
    for (int i = 0; i < 10; ++i) f.post("/v1/completions", R"({"prompt":"x"})", {{"X-Session-ID", fmt::format("s{}", i)}});
    state = *parse_json(admin(f, "GET", "/admin/rollouts")->body);
    if (state["current"]["phase"] != "progressing") break;
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_EQ(state["current"]["phase"], "aborted") << state.dump();
  EXPECT_EQ(state["history"][0]["phase"], "aborted") << state.dump();  // as it is, not as last stored
  // Nothing reached the file while it was locked; a new rollout waits for the old one's end.
  EXPECT_EQ(stored(phase_sql.c_str()), phase_before);
  EXPECT_EQ(stored(actions_sql.c_str()), actions_before);
  EXPECT_EQ(stored(analyses_sql.c_str()), analyses_before);
  auto refused = admin(f, "POST", "/admin/rollouts", spec);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().status, 503);
  EXPECT_NE(refused.error().body.find("the store has not yet taken its end"), std::string::npos)
      << refused.error().body;
  ASSERT_EQ(sqlite3_exec(lock, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  std::string phase;
  for (int i = 0; i < 100 && phase != "aborted;"; ++i) {
    std::this_thread::sleep_for(50ms);
    phase = stored(phase_sql.c_str());
  }
  EXPECT_EQ(phase, "aborted;");
  const std::string actions = stored(actions_sql.c_str());
  EXPECT_TRUE(actions.starts_with(actions_before)) << actions;
  EXPECT_TRUE(actions.ends_with("abort;")) << actions;
  EXPECT_NE(actions.find("analysis failed;", actions_before.size()), std::string::npos) << actions;
  // The failed analysis that aborted it, with its reason, is stored too.
  const std::string analyses = stored(analyses_sql.c_str());
  EXPECT_TRUE(analyses.starts_with(analyses_before)) << analyses;
  EXPECT_GT(analyses.size(), analyses_before.size()) << analyses;
  sqlite3_close(lock);
  EXPECT_TRUE(admin(f, "POST", "/admin/rollouts", spec)) << "the old rollout's end is stored: a new one may start";
}

// A store that refuses writes: a start is a 503 to retry; a router stopped meanwhile says what
// the store lacks, rather than dropping it in silence; restarted, it resumes from what the store
// holds (the pause was never stored, so the rollout is progressing again).
TEST(Router, StoppingWithWritesTheStoreRefusedSaysWhatIsMissing) {
  TestHttpServer a(named("a")), b(named("b"));
  const std::string db = ::testing::TempDir() + "/router_store_refused_at_stop.db";
  std::filesystem::remove(db);
  auto configure = two_versions(a, b, db);
  const std::string spec = R"({"name":"r","stable":"v1","candidate":"v2","steps":[{"setWeight":20},{"pause":{"duration":"1h"}}]})";
  sqlite3* lock = nullptr;
  {
    std::optional<Fixture> f;
    f.emplace(std::vector<TestHttpServer*>{}, "round_robin", std::vector<http::Url>{}, configure);
    // A start the store cannot take is a 503 to retry, and nothing starts.
    ASSERT_EQ(sqlite3_open(db.c_str(), &lock), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(lock, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
    auto refused = admin(*f, "POST", "/admin/rollouts", spec);
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().status, 503);
    EXPECT_NE(refused.error().body.find("the rollout did not start; try again once the store takes writes"),
              std::string::npos) << refused.error().body;
    EXPECT_TRUE((*parse_json(admin(*f, "GET", "/admin/rollouts")->body))["current"].is_null());
    ASSERT_EQ(sqlite3_exec(lock, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
    auto started = admin(*f, "POST", "/admin/rollouts", spec);
    ASSERT_TRUE(started) << started.error().message;
    EXPECT_EQ((*parse_json(started->body))["phase"], "progressing");
    ASSERT_EQ(sqlite3_exec(lock, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
    ::testing::internal::CaptureStderr();
    auto paused = admin(*f, "POST", "/admin/rollouts/pause", R"({"reason":"look at the dashboards"})");
    EXPECT_TRUE(paused) << paused.error().message;  // in force in memory, answered
    f.reset();  // the router stops: its last write is refused too
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("step 1: pause: look at the dashboards"), std::string::npos) << err;
    EXPECT_NE(err.find("stopping with 1 decision(s) and 0 analysis(es) of rollout 1 not in the rollout store, nor its "
                       "latest state"),
              std::string::npos)
        << err;
  }
  ASSERT_EQ(sqlite3_exec(lock, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(lock);
  Fixture f({}, "round_robin", {}, configure);
  auto state = admin(f, "GET", "/admin/rollouts");
  ASSERT_TRUE(state) << state.error().message;
  const Json current = (*parse_json(state->body))["current"];
  EXPECT_EQ(current["phase"], "progressing") << current.dump();
  EXPECT_EQ(current["weight"], 20) << current.dump();
}

// An abort the store never took is named on the way out: restarted, the rollout would go on.
TEST(Router, StoppingWithALostAbortSaysSo) {
  TestHttpServer a(named("a")), b(named("b"));
  const std::string db = ::testing::TempDir() + "/router_store_lost_abort.db";
  std::filesystem::remove(db);
  std::optional<Fixture> f;
  f.emplace(std::vector<TestHttpServer*>{}, "round_robin", std::vector<http::Url>{}, two_versions(a, b, db));
  ASSERT_TRUE(admin(*f, "POST", "/admin/rollouts", R"({"name":"r","stable":"v1","candidate":"v2","steps":[{"setWeight":20},{"pause":{}}]})"));
  sqlite3* lock = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &lock), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(lock, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  ::testing::internal::CaptureStderr();
  EXPECT_TRUE(admin(*f, "POST", "/admin/rollouts/abort", R"({"reason":"errors"})"));
  f.reset();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("its abort is among them, so restarted it goes on with the candidate at its stored weight; abort it "
                     "again then"),
            std::string::npos)
      << err;
  ASSERT_EQ(sqlite3_exec(lock, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(lock);
}

}  // namespace
}  // namespace sluice::router
