// bench::run against a fake OpenAI server (fake_openai_server.h) on an ephemeral port.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "bench/bench.h"
#include "bench/report.h"
#include "bench/svg.h"
#include "bench/fake_openai_server.h"

namespace sluice::bench {
namespace {

using testing::FakeBehaviour;
using testing::FakeOpenAi;

BenchConfig random_config(const std::string& url, int64_t num_requests) {
  BenchConfig c;
  c.url = url;
  c.num_requests = num_requests;
  c.workload.prompt_tokens = {16, 16};
  c.workload.output_tokens = {8, 8};
  c.workload.token_id_min = 1000;
  c.workload.token_id_max = 1100;
  return c;
}

TEST(BenchRun, ClosedLoopCountsRequestsTokensAndCachedFraction) {
  FakeOpenAi server;
  BenchConfig c = random_config(server.url(), 20);
  c.concurrency = 4;
  auto report = run(c);
  ASSERT_TRUE(report) << report.error().message();
  const Summary& s = report->summary;
  EXPECT_EQ(report->config.model, "fake-model");  // from GET /v1/models
  EXPECT_EQ(report->api_url, server.url() + "/v1");
  EXPECT_EQ(s.num_requests, 20);
  EXPECT_EQ(s.num_ok, 20) << format_report(*report);
  EXPECT_EQ(s.prompt_tokens, 20 * 16);
  EXPECT_EQ(s.output_tokens, 20 * 8);
  ASSERT_TRUE(s.cached_fraction);
  EXPECT_DOUBLE_EQ(*s.cached_fraction, 0.25);
  EXPECT_EQ(s.ttft_ms.count, 20);
  EXPECT_EQ(s.tpot_ms.count, 20);
  EXPECT_EQ(s.itl_ms.count, 20 * 7);
  EXPECT_DOUBLE_EQ(s.tokens_per_chunk, 1);
  ASSERT_EQ(report->records.size(), 20u);
  for (size_t i = 0; i < report->records.size(); ++i) {
    const RequestRecord& r = report->records[i];
    EXPECT_EQ(r.request_idx, static_cast<int64_t>(i));
    EXPECT_EQ(r.finish_reason, "length");
    EXPECT_LE(r.ttft_s, r.e2e_s);
  }
  // What the server saw: token-id prompts in range, streaming with usage, exact output lengths.
  const auto bodies = server.bodies();
  ASSERT_EQ(bodies.size(), 20u);
  for (const auto& b : bodies) {
    ASSERT_EQ(b["prompt"].size(), 16u);
    for (const auto& id : b["prompt"]) EXPECT_TRUE(id.get<int>() >= 1000 && id.get<int>() < 1100) << id;
    EXPECT_EQ(b["model"], "fake-model");
    EXPECT_EQ(b["stream"], true);
    EXPECT_EQ(b["stream_options"]["include_usage"], true);
    EXPECT_EQ(b["ignore_eos"], true);
    EXPECT_EQ(b["max_tokens"], 8);
  }
  EXPECT_LE(server.max_in_flight(), 4);
  EXPECT_LE(server.num_connections(), 1 + 4);  // GET /v1/models, then keep-alive: one per client
}

TEST(BenchRun, OpenLoopSendsEveryRequestWithinTheConcurrencyCap) {
  FakeOpenAi server;
  BenchConfig c = random_config(server.url(), 30);
  c.model = "given";
  c.rate = 500;
  c.max_concurrency = 3;
  c.workload.prompt_format = PromptFormat::kText;
  auto report = run(c);
  ASSERT_TRUE(report) << report.error().message();
  EXPECT_EQ(report->summary.num_ok, 30) << format_report(*report);
  EXPECT_EQ(report->summary.output_tokens, 30 * 8);
  EXPECT_LE(server.max_in_flight(), 3);
  for (const auto& b : server.bodies()) {
    EXPECT_EQ(b["model"], "given");
    EXPECT_TRUE(b["prompt"].is_string());
  }
}

TEST(BenchRun, CountsErrorsByKindAndKeepsGoing) {
  // Of 30 requests, arrivals 3, 6, ..., 30 get 429 (10) and arrivals 5, 10, 20, 25 are cut off
  // mid-stream (15 and 30 were refused first): 16 succeed.
  FakeOpenAi server(FakeBehaviour{.reject_every = 3, .drop_every = 5});
  BenchConfig c = random_config(server.url(), 30);
  c.concurrency = 3;
  auto report = run(c);
  ASSERT_TRUE(report) << report.error().message();
  const Summary& s = report->summary;
  EXPECT_EQ(s.num_requests, 30);
  EXPECT_EQ(s.num_ok, 16) << format_report(*report);
  EXPECT_EQ(s.num_errors, 14);
  std::map<std::string, int64_t> by_kind;
  for (const ErrorSummary& e : s.errors) by_kind[e.kind] = e.count;
  EXPECT_EQ(by_kind, (std::map<std::string, int64_t>{{"http_429", 10}, {"closed", 4}}));
  ASSERT_FALSE(s.errors.empty());
  EXPECT_NE(s.errors[0].sample.find("queue is full"), std::string::npos) << s.errors[0].sample;
  EXPECT_EQ(s.output_tokens, 16 * 8);  // the tokens of failed requests do not count
}

TEST(BenchRun, EveryRequestFailingIsAReportNotACrash) {
  FakeOpenAi server(FakeBehaviour{.fail_all_with = 500});
  auto report = run(random_config(server.url(), 5));
  ASSERT_TRUE(report) << report.error().message();
  EXPECT_EQ(report->summary.num_ok, 0);
  ASSERT_EQ(report->summary.errors.size(), 1u);
  EXPECT_EQ(report->summary.errors[0].kind, "http_500");
  EXPECT_EQ(report->summary.errors[0].count, 5);
  EXPECT_NE(render_svg(*report).find("</svg>"), std::string::npos);
}

TEST(BenchRun, AnswersThatAreNotStreamsOrCarryAnErrorEventAreErrors) {
  FakeOpenAi plain(FakeBehaviour{.no_stream = true});
  auto report = run(random_config(plain.url(), 2));
  ASSERT_TRUE(report) << report.error().message();
  ASSERT_EQ(report->summary.errors.size(), 1u);
  EXPECT_EQ(report->summary.errors[0].kind, "bad_stream");
  EXPECT_NE(report->summary.errors[0].sample.find("not a stream"), std::string::npos)
      << report->summary.errors[0].sample;

  FakeOpenAi failing(FakeBehaviour{.error_event = true});
  report = run(random_config(failing.url(), 2));
  ASSERT_TRUE(report) << report.error().message();
  ASSERT_EQ(report->summary.errors.size(), 1u);
  EXPECT_EQ(report->summary.errors[0].kind, "stream_error");
  EXPECT_NE(report->summary.errors[0].sample.find("out of KV blocks"), std::string::npos);

  // [DONE] alone answered nothing: not an ok request with no tokens.
  FakeOpenAi empty(FakeBehaviour{.done_only = true});
  report = run(random_config(empty.url(), 2));
  ASSERT_TRUE(report) << report.error().message();
  EXPECT_EQ(report->summary.num_ok, 0);
  ASSERT_EQ(report->summary.errors.size(), 1u);
  EXPECT_EQ(report->summary.errors[0].kind, "bad_stream");
  EXPECT_NE(report->summary.errors[0].sample.find("[DONE] before any token or finish_reason"), std::string::npos)
      << report->summary.errors[0].sample;
  // No latency was measured: the JSON says null, not 0 ms.
  const nlohmann::json j = report_json(*report);
  EXPECT_EQ(j["summary"]["ttft_ms"]["count"], 0);
  EXPECT_TRUE(j["summary"]["ttft_ms"]["p50"].is_null()) << j["summary"]["ttft_ms"].dump();
}

TEST(BenchRun, RefusedConnectionsAreErrorsNotAHang) {
  // A port bound but not listening, held to the end: connections are refused, and no other
  // test (make test runs two at once) can start a server on it meanwhile.
  const int held = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(held, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(held, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(held, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const uint16_t port = ntohs(addr.sin_port);
  BenchConfig c = random_config(fmt::format("http://127.0.0.1:{}", port), 4);
  c.concurrency = 2;
  // Without --model the run cannot start at all: it says why, and how to go on.
  auto no_model = run(c);
  ASSERT_FALSE(no_model);
  EXPECT_NE(no_model.error().message().find("cannot list the server's models"), std::string::npos);
  EXPECT_NE(no_model.error().message().find("--model"), std::string::npos);
  c.model = "m";
  auto report = run(c);
  ASSERT_TRUE(report) << report.error().message();
  EXPECT_EQ(report->summary.num_ok, 0);
  ASSERT_EQ(report->summary.errors.size(), 1u);
  EXPECT_EQ(report->summary.errors[0].kind, "connect");
  EXPECT_EQ(report->summary.errors[0].count, 4);
  EXPECT_TRUE(report->gave_up.empty());
  // A server gone for good: sending stops after 32 refused in a row, said so, not at the
  // 5000th (a closed loop spun through them at thousands a second); the same in warmup.
  c.num_requests = 5000;
  auto gone = run(c);
  ASSERT_TRUE(gone) << gone.error().message();
  EXPECT_GE(gone->records.size(), 32u);
  EXPECT_LE(gone->records.size(), 34u);  // and the other sender's last
  EXPECT_NE(gone->gave_up.find("the server refused 32 connections in a row"), std::string::npos) << gone->gave_up;
  EXPECT_EQ(report_json(*gone)["gave_up"], gone->gave_up);
  c.warmup = 100;
  auto warm = run(c);
  ASSERT_TRUE(warm) << warm.error().message();
  EXPECT_TRUE(warm->records.empty());
  EXPECT_TRUE(warm->gave_up.starts_with("warmup: the server refused 32")) << warm->gave_up;
  // Nothing left to stop: 32 refused of 32 asked is a run that ended, not one that gave up.
  c.warmup = 0;
  c.num_requests = 32;
  auto all = run(c);
  ASSERT_TRUE(all) << all.error().message();
  EXPECT_EQ(all->records.size(), 32u);
  EXPECT_TRUE(all->gave_up.empty()) << all->gave_up;
  ::close(held);
}

TEST(BenchRun, ChatSessionsResendTheirHistoryWithTheServersAnswers) {
  // 3 sessions x 3 turns over 2 clients: 9 requests. Turn t of a session carries 2t+1 messages,
  // its assistant messages are answers the server gave, and "user" names the session.
  FakeOpenAi server;
  BenchConfig c;
  c.url = server.url() + "/v1";
  c.concurrency = 2;
  c.workload.kind = WorkloadKind::kChat;
  c.workload.api = Api::kChat;
  c.workload.prompt_format = PromptFormat::kText;
  c.workload.num_sessions = 3;
  c.workload.num_turns = 3;
  c.workload.prompt_tokens = {6, 6};
  c.workload.output_tokens = {4, 4};
  auto report = run(c);
  ASSERT_TRUE(report) << report.error().message();
  EXPECT_EQ(report->summary.num_ok, 9) << format_report(*report);
  EXPECT_EQ(report->summary.output_tokens, 9 * 4);
  const auto answers = server.answers();
  std::map<std::string, std::vector<size_t>> turns;  // user -> message counts in arrival order
  for (const auto& b : server.bodies()) {
    const std::string user = b["user"].get<std::string>();
    turns[user].push_back(b["messages"].size());
    for (const auto& m : b["messages"]) {
      if (m["role"] == "assistant") {
        EXPECT_TRUE(answers.contains(m["content"].get<std::string>())) << m;
      }
    }
  }
  const std::vector<size_t> expected = {1, 3, 5};
  EXPECT_EQ(turns, (std::map<std::string, std::vector<size_t>>{
                       {"session-0", expected}, {"session-1", expected}, {"session-2", expected}}));
  // The prompt tokens the server counted grow with the history; the record keeps them.
  for (const RequestRecord& r : report->records) EXPECT_EQ(r.prompt_tokens, r.expected_prompt_tokens);
}

TEST(BenchRun, SharedPrefixRunsEveryPairOnceWithoutACount) {
  FakeOpenAi server;
  BenchConfig c;
  c.url = server.url();
  c.concurrency = 3;
  c.workload.kind = WorkloadKind::kSharedPrefix;
  c.workload.num_prefixes = 2;
  c.workload.num_questions = 5;
  c.workload.prefix_tokens = 32;
  c.workload.prompt_tokens = {8, 8};
  c.workload.output_tokens = {2, 2};
  auto report = run(c);
  ASSERT_TRUE(report) << report.error().message();
  EXPECT_EQ(report->summary.num_ok, 10);
  EXPECT_EQ(report->config.num_requests, 10);
  EXPECT_EQ(report->summary.prompt_tokens, 10 * 40);
  std::set<nlohmann::json> prefixes;
  for (const auto& b : server.bodies()) {
    prefixes.insert(nlohmann::json(std::vector<nlohmann::json>(b["prompt"].begin(), b["prompt"].begin() + 32)));
  }
  EXPECT_EQ(prefixes.size(), 2u);
}

TEST(BenchRun, WarmupRequestsAreSentButNotCounted) {
  FakeOpenAi server(FakeBehaviour{.report_cached = false});
  BenchConfig c = random_config(server.url(), 5);
  c.warmup = 3;
  auto report = run(c);
  ASSERT_TRUE(report) << report.error().message();
  EXPECT_EQ(report->records.size(), 5u);
  EXPECT_EQ(server.bodies().size(), 8u);
  EXPECT_EQ(server.num_connections(), 2);  // GET /v1/models, then warmup's connection carries on
  EXPECT_FALSE(report->summary.cached_fraction);
}

TEST(BenchRun, DurationStopsSendingAndInFlightRequestsFinish) {
  FakeOpenAi server;
  BenchConfig c = random_config(server.url(), 0);
  c.duration_s = 0.15;
  c.concurrency = 2;
  auto report = run(c);
  ASSERT_TRUE(report) << report.error().message();
  EXPECT_GT(report->summary.num_ok, 0);
  EXPECT_EQ(report->summary.num_errors, 0) << format_report(*report);
  for (const RequestRecord& r : report->records) EXPECT_LT(r.start_s, 0.15);
}

TEST(BenchRun, RequestsStillInFlightAfterTheDrainTimeoutAreCancelled) {
  FakeOpenAi server(FakeBehaviour{.hang = true});
  BenchConfig c = random_config(server.url(), 0);
  c.duration_s = 0.05;
  c.drain_timeout_s = 0.05;
  c.concurrency = 2;
  auto report = run(c);
  ASSERT_TRUE(report) << report.error().message();
  EXPECT_EQ(report->summary.num_requests, 2);
  ASSERT_EQ(report->summary.errors.size(), 1u);
  EXPECT_EQ(report->summary.errors[0].kind, "cancelled");
}

TEST(BenchRun, RejectsAConfigurationWithoutBound) {
  BenchConfig c;
  auto report = run(c);
  ASSERT_FALSE(report);
  EXPECT_NE(report.error().message().find("--num-requests or --duration"), std::string::npos);
  c.num_requests = 1;
  c.url = "ftp://example.com";
  report = run(c);
  ASSERT_FALSE(report);
  EXPECT_NE(report.error().message().find("not http or https"), std::string::npos);
}

}  // namespace
}  // namespace sluice::bench
