// Running suites against a scripted OpenAI server: the requests sent, the cache, resuming a run
// whose answers stopped coming, retries, and an unreachable endpoint.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <set>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/http_test_server.h"
#include "common/mutex.h"
#include "eval/report.h"
#include "eval/runner.h"

namespace sluice::eval {
namespace {

namespace fs = std::filesystem;
using http::testing::ReceivedRequest;
using http::testing::TestExchange;

// Answers every completion with its prompt upper-cased; `fail_from` > 0: the n-th request on
// (1-based) gets 503; `reject_first`: that many 429s first; `fingerprint` as system_fingerprint.
class ScriptedServer {
 public:
  ScriptedServer()
      : server_([this](const ReceivedRequest& r, TestExchange& ex) -> boost::asio::awaitable<void> {
          const int n = ++requests_;
          Json body = Json::parse(r.body);
          {
            MutexLock lock(mu_);
            bodies_.push_back(body);
          }
          if (n <= reject_first.load()) {
            co_await ex.respond(429, R"({"error": {"message": "busy"}})");
            co_return;
          }
          if (fail_from.load() > 0 && n >= fail_from.load()) {
            co_await ex.respond(503, R"({"error": {"message": "down"}})");
            co_return;
          }
          if (body.contains("prompt") && body["prompt"] == "bad") {
            co_await ex.respond(400, R"({"error": {"message": "no thanks"}})");
            co_return;
          }
          std::string text = body.contains("prompt") ? body["prompt"].get<std::string>()
                                                     : body["messages"].back()["content"].get<std::string>();
          for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
          const bool chat = r.target.ends_with("/chat/completions");
          Json choice = {{"index", 0}, {"finish_reason", "stop"}};
          if (chat) choice["message"] = {{"role", "assistant"}, {"content", text}};
          else choice["text"] = text;
          Json resp = {{"choices", Json::array({choice})}, {"system_fingerprint", fingerprint_()},
                       {"usage", {{"prompt_tokens", 1}, {"completion_tokens", 2}}}};
          co_await ex.respond(200, resp.dump());
        }) {}

  std::string url() const { return fmt::format("http://127.0.0.1:{}/v1", server_.port()); }
  int requests() const { return requests_.load(); }
  std::vector<Json> bodies() const {
    MutexLock lock(mu_);
    return bodies_;
  }
  void set_fingerprint(std::string f) {
    MutexLock lock(mu_);
    fingerprint_value_ = std::move(f);
  }

  std::atomic<int> fail_from{0};
  std::atomic<int> reject_first{0};

 private:
  std::string fingerprint_() {
    MutexLock lock(mu_);
    return fingerprint_value_;
  }
  std::atomic<int> requests_{0};
  mutable Mutex mu_;
  std::vector<Json> bodies_ SLUICE_GUARDED_BY(mu_);
  std::string fingerprint_value_ SLUICE_GUARDED_BY(mu_) = "fp_one";
  http::testing::TestHttpServer server_;  // last: stops first
};

Suite suite_for(const std::string& url, int num_tests) {
  Json doc = {{"description", "upper"},
              {"providers", Json::array({{{"id", "openai:completion:m"}, {"config", {{"apiBaseUrl", url}}}}})},
              {"prompts", Json::array({"say {{w}}"})},
              {"tests", Json::array()}};
  for (int i = 0; i < num_tests; ++i) {
    doc["tests"].push_back({{"vars", {{"w", fmt::format("w{}", i)}}},
                            {"assert", Json::array({{{"type", "equals"}, {"value", "SAY W{{ w[1:] }}"}}})}});
  }
  auto s = parse_suite(doc, "");
  EXPECT_TRUE(s) << s.error().message();
  return *s;
}

struct TempDb {
  TempDb() : path((fs::temp_directory_path() / fmt::format("sluice_eval_run_{}_{}.db", ::getpid(), n++)).string()) {}
  ~TempDb() {
    for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(path + suffix);
  }
  std::string path;
  static inline int n = 0;
};

RunOptions fast_options() {
  RunOptions o;
  o.jobs = 3;
  o.call.max_retries = 2;
  o.call.backoff = std::chrono::milliseconds(1);
  o.call.timeout = std::chrono::milliseconds(5000);
  return o;
}

// Items are stored and compared by their names: two alike are refused before any request
// (they overwrote each other's results; two multiple-choice items with one id crashed).
// text_offset in bytes (sluice, llama.cpp) or in characters (OpenAI, vLLM): both read as bytes.
TEST(EvalReply, TextOffsetsInBytesOrCharactersAreReadAsBytes) {
  for (const Json& offsets : {Json::array({0, 3, 5, 8}), Json::array({0, 3, 4, 7})}) {
    const Json body = {{"choices", Json::array({{{"text", "caf\u00e9 au lait"},
                                                   {"logprobs", {{"tokens", {"caf", "\u00e9", " au", " lait"}},
                                                                 {"token_logprobs", {nullptr, -1.0, -2.0, -3.0}},
                                                                 {"text_offset", offsets}}}}})}};
    auto r = parse_reply(body, "completion");
    ASSERT_TRUE(r) << r.error().message();
    EXPECT_EQ(r->text_offsets, (std::vector<int64_t>{0, 3, 5, 8})) << offsets.dump();
  }
}

// A run left "running" by a process that is gone (a second Ctrl-C quits at once) is stored as
// interrupted by the next process to open the store; one this process owns stays running.
TEST(EvalStore, RunsOfAProcessThatIsGoneAreClosedAsInterrupted) {
  TempDb db;
  auto mine = Store::open(db.path);
  ASSERT_TRUE(mine);
  const int64_t own = *(*mine)->begin_run({.suite = "s", .fingerprint = "f"});
  const pid_t child = ::fork();
  if (child == 0) {  // opens the store, starts a run and quits without finishing it
    auto s = Store::open(db.path);
    ::_exit(s && (*s)->begin_run({.suite = "s", .fingerprint = "f"}) ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  auto later = Store::open(db.path);
  ASSERT_TRUE(later);
  EXPECT_EQ((*(*later)->run(own))->status, "running");
  const auto abandoned = (*later)->run(own + 1);
  ASSERT_TRUE(abandoned && *abandoned);
  EXPECT_EQ((*abandoned)->status, "interrupted");
  EXPECT_EQ((*abandoned)->summary["abandoned"], true);
}

TEST(EvalRun, ItemsThatWouldShareANameAreRefused) {
  const Suite base = suite_for("http://127.0.0.1:9/v1", 2);
  auto refused = [](const Suite& s, const std::string& expected) {
    auto plan = plan_run(s, fast_options());
    ASSERT_FALSE(plan);
    EXPECT_NE(plan.error().message().find(expected), std::string::npos) << plan.error().message();
  };
  Suite tests = base;
  tests.tests[1].description = tests.tests[0].description;
  tests.tests[1].vars = tests.tests[0].vars;
  refused(tests, "two tests have the description 'test 1' and the same vars");
  Suite providers = base;
  providers.providers.push_back(providers.providers[0]);
  refused(providers, "two providers are labelled 'openai:completion:m'");
  Suite items = base;
  items.likelihood.push_back({.name = "mc", .type = "multiple-choice"});
  items.likelihood[0].items.resize(2);
  items.likelihood[0].items[0].id = items.likelihood[0].items[1].id = "q";
  refused(items, "likelihood task 'mc' has two items with id 'q'");
}

TEST(EvalRun, RunsGradesStoresAndAnswersTheSecondRunFromTheCache) {
  ScriptedServer server;
  TempDb db;
  auto store = Store::open(db.path);
  ASSERT_TRUE(store);
  const Suite suite = suite_for(server.url(), 6);
  auto plan = plan_run(suite, fast_options());
  ASSERT_TRUE(plan) << plan.error().message();
  EXPECT_EQ(plan->tasks.size(), 6u);
  EXPECT_EQ(plan->endpoint_fingerprints[0], "fp_one");
  auto out = execute_run(*plan, **store, fast_options());
  ASSERT_TRUE(out) << out.error().message();
  EXPECT_EQ(out->num_passed, 6);
  EXPECT_EQ(out->num_sent, 6);
  EXPECT_EQ(server.requests(), 7);  // the probe and the six
  auto rows = (*store)->results(out->run_id);
  ASSERT_EQ(rows->size(), 6u);
  EXPECT_EQ((*rows)[0].output, "SAY W0");
  EXPECT_EQ((*rows)[0].system_fingerprint, "fp_one");
  EXPECT_EQ((*rows)[0].request["prompt"], "say w0");

  // Again: nothing sent but the probe, the same fingerprint.
  auto plan2 = plan_run(suite, fast_options());
  EXPECT_EQ(plan2->fingerprint, plan->fingerprint);
  auto out2 = execute_run(*plan2, **store, fast_options());
  EXPECT_EQ(out2->num_cached, 6);
  EXPECT_EQ(out2->num_sent, 0);
  EXPECT_EQ(server.requests(), 8);
  // The server changed (another system_fingerprint): a new fingerprint, and every request again.
  server.set_fingerprint("fp_two");
  auto plan3 = plan_run(suite, fast_options());
  EXPECT_NE(plan3->fingerprint, plan->fingerprint);
  auto out3 = execute_run(*plan3, **store, fast_options());
  EXPECT_EQ(out3->num_sent, 6);
  // --no-cache sends everything.
  RunOptions no_cache = fast_options();
  no_cache.use_cache = false;
  EXPECT_EQ(execute_run(*plan3, **store, no_cache)->num_sent, 6);
}

TEST(EvalRun, ARunWhoseAnswersStoppedResumesWithoutSendingFinishedRequests) {
  ScriptedServer server;
  TempDb db;
  auto store = Store::open(db.path);
  const Suite suite = suite_for(server.url(), 10);
  RunOptions o = fast_options();
  o.jobs = 1;
  o.call.max_retries = 0;
  server.fail_from = 6;  // the probe and four answers, then the server is down
  auto plan = plan_run(suite, o);
  ASSERT_TRUE(plan);
  auto out = execute_run(*plan, **store, o);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->num_errors, 6);
  EXPECT_EQ(out->num_sent, 10);  // the refused ones were sent too
  EXPECT_EQ((*(*store)->run(out->run_id))->status, "failed");
  server.fail_from = 0;
  const int before = server.requests();
  auto plan2 = plan_run(suite, o);
  auto out2 = execute_run(*plan2, **store, o);
  EXPECT_EQ(out2->num_errors, 0);
  EXPECT_EQ(out2->num_cached, 4);
  EXPECT_EQ(out2->num_sent, 6);
  EXPECT_EQ(server.requests() - before, 1 + 6);  // the probe and the six missing
  EXPECT_EQ((*(*store)->run(out2->run_id))->status, "done");
}

TEST(EvalRun, RetriesOverloadButNotARefusal) {
  ScriptedServer server;
  server.reject_first = 2;
  Provider p = *parse_provider(Json{{"id", "openai:completion:m"}, {"config", {{"apiBaseUrl", server.url()}}}});
  CallOptions o{.timeout = std::chrono::milliseconds(5000), .max_retries = 3, .backoff = std::chrono::milliseconds(1)};
  auto r = call(p, Json{{"prompt", "x"}}, o);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->attempts, 3);
  EXPECT_EQ(r->text, "X");
  const int before = server.requests();
  auto bad = call(p, Json{{"prompt", "bad"}}, o);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code(), StatusCode::kInvalid);
  EXPECT_NE(bad.error().message().find("no thanks"), std::string::npos);
  EXPECT_EQ(server.requests() - before, 1);
}

// A run with likelihood tasks says what its pass rate counts (tests only), and a multiple-choice
// item that failed says which choice won.
TEST(EvalReport, LikelihoodItemsAreNamedApartFromTheTestsPassRate) {
  RunRow run{.id = 1, .suite = "s", .status = "done"};
  run.summary = {{"items", 3}, {"samples", 3}, {"passed", 2}, {"failed", 1}, {"errors", 0}, {"test_samples", 1},
                 {"pass_rate", 1.0}, {"score", 1.0}};
  ResultRow cloze{.provider = "p", .test = "cloze q1"};
  cloze.grades = {{"kind", "multiple-choice"}, {"pred", 1}, {"gold", 0}};
  const std::string text = run_text(run, {cloze}, {});
  EXPECT_NE(text.find("pass rate 100.0%   score 1.000   (of the 1 test samples; likelihood items"), std::string::npos)
      << text;
  EXPECT_NE(text.find("FAIL [p] cloze q1 #0: the most likely choice is #1, the gold one #0 (counting from 0)"), std::string::npos) << text;
}

// The probe before a run retries a 503 (an overloaded server), though not a failed connection
// or a timeout (tests/eval: a hung endpoint is asked once).
TEST(EvalRun, TheProbeRetriesAnOverloadedEndpoint) {
  ScriptedServer server;
  server.fail_from = 1;  // 503: retried, as an overloaded server's answer is
  RunOptions o = fast_options();
  auto plan = plan_run(suite_for(server.url(), 1), o);
  ASSERT_FALSE(plan);
  EXPECT_EQ(server.requests(), 3);  // 1 + max_retries
  EXPECT_NE(plan.error().message().find("failed after 3 attempts"), std::string::npos) << plan.error().message();
}

TEST(EvalRun, AnUnreachableEndpointIsAnInfrastructureError) {
  int port = 0;
  {
    ScriptedServer gone;  // a port that was just free
    port = std::stoi(gone.url().substr(17));
  }
  const Suite suite = suite_for(fmt::format("http://127.0.0.1:{}/v1", port), 2);
  RunOptions o = fast_options();
  o.call.max_retries = 1;
  auto plan = plan_run(suite, o);
  ASSERT_FALSE(plan);
  EXPECT_EQ(plan.error().code(), StatusCode::kUnavailable);
  EXPECT_NE(plan.error().message().find("cannot be reached"), std::string::npos);
}

// --base-url moves the providers, and a judge the suite left on OpenAI's default endpoint; a
// judge the suite points somewhere keeps its endpoint (it was never moved).
TEST(EvalRun, BaseUrlMovesAJudgeOnlyWhenTheSuiteNamedNoEndpoint) {
  ScriptedServer server, judge_server;
  const std::string judge_url = judge_server.url();
  unsetenv("OPENAI_BASE_URL");
  unsetenv("OPENAI_API_BASE_URL");
  Json rubric = {{"type", "llm-rubric"}, {"value", "kind"}};
  Json pinned = rubric;
  pinned["provider"] = {{"id", "openai:chat:grader"}, {"config", {{"apiBaseUrl", judge_url}}}};
  Json doc = {{"providers", Json::array({"openai:chat:m"})},
              {"prompts", Json::array({"{{q}}"})},
              {"judge", "openai:chat:gpt-4o"},
              {"tests", Json::array({{{"vars", {{"q", "hi"}}}, {"assert", Json::array({rubric, pinned})}}})}};
  auto suite = parse_suite(doc, "");
  ASSERT_TRUE(suite) << suite.error().message();
  RunOptions o = fast_options();
  o.base_url = server.url();
  auto plan = plan_run(*suite, o);
  ASSERT_TRUE(plan) << plan.error().message();
  EXPECT_EQ(plan->suite.providers[0].base_url, server.url());
  ASSERT_TRUE(plan->suite.judge);
  EXPECT_EQ(plan->suite.judge->base_url, server.url());
  ASSERT_TRUE(plan->suite.tests[0].asserts[1].judge);
  EXPECT_EQ(plan->suite.tests[0].asserts[1].judge->base_url, judge_url);
  // As read, before --base-url, the default judge is on OpenAI's endpoint.
  EXPECT_EQ(suite->judge->base_url, "https://api.openai.com/v1");
  EXPECT_TRUE(suite->judge->base_url_default);
  // OPENAI_BASE_URL is not the suite: --base-url moves a judge on it as it moves the providers.
  setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1", 1);
  auto from_env = parse_suite(doc, "");
  unsetenv("OPENAI_BASE_URL");
  ASSERT_TRUE(from_env) << from_env.error().message();
  EXPECT_EQ(from_env->judge->base_url, "http://127.0.0.1:1/v1");
  auto moved = plan_run(*from_env, o);
  ASSERT_TRUE(moved) << moved.error().message();
  EXPECT_EQ(moved->suite.judge->base_url, server.url());
  EXPECT_EQ(moved->suite.tests[0].asserts[1].judge->base_url, judge_url);
}

// A judge is probed with the providers: one that cannot be reached is an infrastructure error
// before any request, not found after every answer is in.
TEST(EvalRun, AnUnreachableJudgeIsFoundBeforeAnyRequest) {
  ScriptedServer server;
  Json doc = {{"providers", Json::array({"openai:chat:m"})},
              {"prompts", Json::array({"{{q}}"})},
              {"judge", {{"id", "openai:chat:grader"}, {"config", {{"apiBaseUrl", "http://127.0.0.1:1/v1"}}}}},
              {"tests", Json::array({{{"vars", {{"q", "hi"}}},
                                      {"assert", Json::array({{{"type", "llm-rubric"}, {"value", "kind"}}})}}})}};
  auto suite = parse_suite(doc, "");
  ASSERT_TRUE(suite) << suite.error().message();
  RunOptions o = fast_options();
  o.base_url = server.url();
  auto plan = plan_run(*suite, o);
  ASSERT_FALSE(plan);
  EXPECT_EQ(plan.error().code(), StatusCode::kUnavailable);
  EXPECT_NE(plan.error().message().find("judge 'openai:chat:grader' cannot be reached"), std::string::npos)
      << plan.error().message();
}

// llm-rubric with no judge anywhere is the suite's error, found before any request.
TEST(EvalRun, ARubricWithoutAJudgeIsRefusedBeforeAnyRequest) {
  ScriptedServer server;
  Json doc = {{"providers", Json::array({{{"id", "openai:completion:m"}, {"config", {{"apiBaseUrl", server.url()}}}}})},
              {"prompts", Json::array({"{{q}}"})},
              {"tests", Json::array({{{"description", "polite"}, {"vars", {{"q", "hi"}}},
                                      {"assert", Json::array({{{"type", "llm-rubric"}, {"value", "kind"}}})}}})}};
  auto suite = parse_suite(doc, "");
  ASSERT_TRUE(suite) << suite.error().message();
  auto plan = plan_run(*suite, fast_options());
  ASSERT_FALSE(plan);
  EXPECT_EQ(plan.error().code(), StatusCode::kInvalid);
  EXPECT_NE(plan.error().message().find("polite: llm-rubric needs a judge"), std::string::npos) << plan.error().message();
  EXPECT_EQ(server.requests(), 0);
}

TEST(EvalRun, RepeatsGetTheirOwnSeedsAndChatPromptsRender) {
  ScriptedServer server;
  TempDb db;
  auto store = Store::open(db.path);
  Json doc = {{"providers", Json::array({{{"id", "openai:chat:m"}, {"config", {{"apiBaseUrl", server.url()}, {"seed", 10}}}}})},
              {"prompts", Json::array({{{"label", "p"}, {"messages", Json::array({{{"role", "system"}, {"content", "be {{mood}}"}},
                                                                                   {{"role", "user"}, {"content", "hi {{name}}"}}})}}})},
              {"tests", Json::array({{{"vars", {{"mood", "kind"}, {"name", "ann"}}}, {"assert", Json::array({{{"type", "equals"}, {"value", "HI ANN"}}})}}})},
              {"evaluateOptions", {{"repeat", 3}}}};
  auto suite = parse_suite(doc, "");
  ASSERT_TRUE(suite) << suite.error().message();
  auto plan = plan_run(*suite, fast_options());
  ASSERT_TRUE(plan);
  ASSERT_EQ(plan->tasks.size(), 3u);
  auto out = execute_run(*plan, **store, fast_options());
  EXPECT_EQ(out->num_passed, 3);
  EXPECT_EQ(out->summary["pass@1"], 1.0);
  EXPECT_EQ(out->summary["pass@3"], 1.0);
  EXPECT_EQ(out->summary["pass^3"], 1.0);
  std::set<int64_t> seeds;
  for (const Json& b : server.bodies()) {
    if (b.value("max_tokens", 0) == 1) continue;  // the probe
    EXPECT_EQ(b["messages"][0]["content"], "be kind");
    seeds.insert(b["seed"].get<int64_t>());
  }
  EXPECT_EQ(seeds, (std::set<int64_t>{10, 11, 12}));
}

}  // namespace
}  // namespace sluice::eval
