// The router over scripted replicas on loopback: relaying (whole and streamed), retries,
// overload, a stream that fails midway, a client that goes away, affinity, and its own routes.
#include "router/router.h"

#include <atomic>
#include <map>
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <gtest/gtest.h>

#include "common/http_test_server.h"
#include "common/json.h"

namespace sluice::router {
namespace {

namespace net = boost::asio;
using http::testing::ReceivedRequest;
using http::testing::TestExchange;
using http::testing::TestHttpServer;
using namespace std::chrono_literals;

// A replica that answers every generation with its own name, streamed when asked.
TestHttpServer::Handler named(std::string name, std::atomic<int>* served = nullptr) {
  return [name, served](const ReceivedRequest& r, TestExchange& ex) -> net::awaitable<void> {
    if (r.target == "/health") {
      co_await ex.respond(200, R"({"status":"ok"})");
      co_return;
    }
    if (r.target == "/v1/models") {
      co_await ex.respond(200, R"({"object":"list","data":[{"id":")" + name + R"("},{"id":"shared"}]})");
      co_return;
    }
    if (served) ++*served;
    if (r.body.find("\"stream\":true") != std::string::npos) {
      co_await ex.begin_chunked(200, "text/event-stream");
      co_await ex.chunk("data: {\"choices\":[{\"text\":\"" + name + "\"}]}\n\n");
      co_await ex.chunk("data: [DONE]\n\n");
      co_await ex.end_chunked();
      co_return;
    }
    co_await ex.respond(200, R"({"replica":")" + name + R"("})");
  };
}

struct Fixture {
  explicit Fixture(std::vector<TestHttpServer*> replicas, std::string policy = "round_robin",
                   std::vector<http::Url> extra = {}) {
    RouterConfig c;
    c.port = 0;
    c.policy = policy;
    c.health_interval_seconds = 0.05;
    c.metrics_interval_seconds = 0;
    c.drain_seconds = 1;
    for (TestHttpServer* s : replicas) extra.push_back(s->url());
    for (const http::Url& u : extra) c.backends.push_back(*parse_backend(u.to_string()));
    config = c;
    auto r = Router::create(std::move(c));
    EXPECT_TRUE(r) << r.error().message();
    router = std::move(*r);
    router->start();
    url = http::Url{"127.0.0.1", router->port(), ""};
  }
  http::HttpResult<http::HttpResponse> post(std::string target, std::string body,
                                            std::vector<http::Header> headers = {}) {
    http::HttpRequest r{.method = "POST", .target = std::move(target), .headers = std::move(headers), .body = std::move(body)};
    return http::fetch(url, r);
  }
  http::HttpResult<http::HttpResponse> get(std::string target) {
    http::HttpRequest r{.target = std::move(target)};
    return http::fetch(url, r);
  }
  RouterConfig config;
  std::unique_ptr<Router> router;
  http::Url url;
};

// A port nothing listens on.
http::Url dead_url() {
  net::io_context io;
  net::ip::tcp::acceptor a(io, {net::ip::make_address("127.0.0.1"), 0});
  const uint16_t port = a.local_endpoint().port();
  return http::Url{"127.0.0.1", port, ""};
}

TEST(Router, RelaysWholeAndStreamedAnswersAndItsOwnRoutes) {
  TestHttpServer a(named("a")), b(named("b"));
  Fixture f({&a, &b});
  auto whole = f.post("/v1/completions", R"({"prompt":"hi"})");
  ASSERT_TRUE(whole) << whole.error().message;
  EXPECT_EQ(whole->body, R"({"replica":"a"})");
  EXPECT_EQ(whole->header("x-sluice-replica"), a.url().to_string());
  auto streamed = f.post("/v1/completions", R"({"prompt":"hi","stream":true})");
  ASSERT_TRUE(streamed) << streamed.error().message;
  EXPECT_EQ(streamed->body, "data: {\"choices\":[{\"text\":\"b\"}]}\n\ndata: [DONE]\n\n");
  EXPECT_EQ(streamed->header("content-type"), "text/event-stream");
  // /v1/models: the union, each id once.
  auto models = f.get("/v1/models");
  ASSERT_TRUE(models);
  auto list = parse_json(models->body);
  ASSERT_TRUE(list);
  EXPECT_EQ((*list)["data"].size(), 3u) << models->body;
  auto health = f.get("/health");
  ASSERT_TRUE(health);
  EXPECT_NE(health->body.find("\"replicas_available\":2"), std::string::npos);
  auto metrics = f.get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("sluice_router_requests_total{backend=\"" + a.url().to_string() +
                               "\",decision=\"balanced\",status=\"200\"} 1"),
            std::string::npos)
      << metrics->body;
  auto missing = f.get("/nothing");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().status, 404);
}

TEST(Router, RetriesAnotherReplicaBeforeAnythingWasSentButRelaysClientErrors) {
  std::atomic<int> served{0};
  TestHttpServer busy([](const ReceivedRequest& r, TestExchange& ex) -> net::awaitable<void> {
    if (r.target == "/health") {
      co_await ex.respond(200, "{}");
      co_return;
    }
    co_await ex.respond(503, R"({"error":{"message":"draining"}})");
  });
  TestHttpServer good(named("good", &served));
  // One replica refuses connections, one answers 503: every request ends on the good one.
  Fixture f({&busy, &good}, "round_robin", {dead_url()});
  for (int i = 0; i < 6; ++i) {
    auto r = f.post("/v1/completions", R"({"prompt":"x"})");
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->body, R"({"replica":"good"})");
  }
  EXPECT_EQ(served.load(), 6);
  EXPECT_NE(f.router->metrics_text().find("sluice_router_retries_total "), std::string::npos);
  // A 400 is the client's: relayed as it is, never retried.
  TestHttpServer strict([](const ReceivedRequest& r, TestExchange& ex) -> net::awaitable<void> {
    if (r.target == "/health") {
      co_await ex.respond(200, "{}");
      co_return;
    }
    co_await ex.respond(400, R"({"error":{"message":"bad prompt"}})");
  });
  std::atomic<int> other{0};
  TestHttpServer spare(named("spare", &other));
  Fixture g({&strict, &spare});
  auto bad = g.post("/v1/completions", R"({"prompt":"x"})");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().status, 400);
  EXPECT_EQ(bad.error().body, R"({"error":{"message":"bad prompt"}})");
  EXPECT_EQ(other.load(), 0);
}

TEST(Router, EveryReplicaSaturatedIsA429WithRetryAfterAndNoneAvailableA503) {
  auto full = [](const ReceivedRequest& r, TestExchange& ex) -> net::awaitable<void> {
    if (r.target == "/health") {
      co_await ex.respond(200, "{}");
      co_return;
    }
    co_await ex.write("HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Type: application/json\r\n"
                      "Content-Length: 2\r\n\r\n{}");
  };
  TestHttpServer a(full), b(full);
  Fixture f({&a, &b});
  auto r = f.post("/v1/chat/completions", R"({"messages":[]})");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().status, 429);
  EXPECT_NE(r.error().body.find("every replica is saturated"), std::string::npos) << r.error().body;
  // Replicas that never pass a health check go down; then there is nobody to ask.
  Fixture g({}, "least_load", {dead_url(), dead_url()});
  for (int i = 0; i < 200 && g.router->backends().num_available() > 0; ++i) std::this_thread::sleep_for(10ms);
  auto none = g.post("/v1/completions", R"({"prompt":"x"})");
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().status, 503);
  auto health = g.get("/health");
  ASSERT_FALSE(health);
  EXPECT_EQ(health.error().status, 503);
}

TEST(Router, AStreamThatFailsMidwayEndsWithAnErrorEventAndDone) {
  TestHttpServer broken([](const ReceivedRequest& r, TestExchange& ex) -> net::awaitable<void> {
    if (r.target == "/health") {
      co_await ex.respond(200, "{}");
      co_return;
    }
    co_await ex.begin_chunked(200, "text/event-stream");
    co_await ex.chunk("data: {\"choices\":[{\"delta\":{\"content\":\"partial\"}}]}\n\n");
    ex.close();  // gone without the last chunk
  });
  Fixture f({&broken});
  auto r = f.post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}],"stream":true})");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_NE(r->body.find("partial"), std::string::npos);
  EXPECT_NE(r->body.find("\"finish_reason\":\"error\""), std::string::npos) << r->body;
  EXPECT_TRUE(r->body.ends_with("data: [DONE]\n\n")) << r->body;
}

// A client that closes while its request is upstream: the upstream connection closes at once
// (the replica's next write fails), for a streamed and for a whole answer.
TEST(Router, AClientThatGoesAwayClosesTheUpstreamRequest) {
  for (bool stream : {false, true}) {
    std::atomic<bool> upstream_saw_close{false};
    TestHttpServer slow([&](const ReceivedRequest& r, TestExchange& ex) -> net::awaitable<void> {
      if (r.target == "/health") {
      co_await ex.respond(200, "{}");
      co_return;
    }
      co_await ex.begin_chunked(200, "text/event-stream");
      for (int i = 0; i < 400; ++i) {
        co_await ex.sleep(10ms);
        if (!co_await ex.chunk("data: {}\n\n")) {
          upstream_saw_close = true;
          co_return;
        }
      }
      co_await ex.end_chunked();
    });
    Fixture f({&slow});
    {
      net::io_context io;
      net::ip::tcp::socket s(io);
      s.connect({net::ip::make_address("127.0.0.1"), f.router->port()});
      const std::string body = stream ? R"({"prompt":"x","stream":true})" : R"({"prompt":"x"})";
      const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
      net::write(s, net::buffer(req));
      std::this_thread::sleep_for(100ms);
    }  // closed
    for (int i = 0; i < 300 && !upstream_saw_close; ++i) std::this_thread::sleep_for(10ms);
    EXPECT_TRUE(upstream_saw_close) << "stream " << stream;
    EXPECT_NE(f.router->metrics_text().find("sluice_router_client_disconnects_total 1"), std::string::npos);
  }
}

// A replica that closes idle keep-alive connections (without saying so) leaves the router's
// pooled connections stale: the request goes again on a fresh one, and the replica is not blamed.
TEST(Router, AStaleIdleConnectionIsNotTheReplicasFailure) {
  std::atomic<int> served{0};
  TestHttpServer closing([&](const ReceivedRequest& r, TestExchange& ex) -> net::awaitable<void> {
    if (r.target != "/health") ++served;
    co_await ex.respond(200, R"({"ok":true})");
    ex.close();  // keep-alive promised, then closed
  });
  Fixture f({&closing});
  for (int i = 0; i < 8; ++i) {
    auto r = f.post("/v1/completions", R"({"prompt":"x"})");
    ASSERT_TRUE(r) << i << ": " << r.error().message;
    std::this_thread::sleep_for(5ms);  // the close reaches the router's idle connection
  }
  EXPECT_EQ(served.load(), 8);
  const std::string m = f.router->metrics_text();
  EXPECT_EQ(m.find("sluice_router_upstream_errors_total{"), std::string::npos) << m;
  EXPECT_NE(m.find("sluice_router_ejections_total{backend=\"" + closing.url().to_string() + "\"} 0"), std::string::npos);
}

// The router counts every answer's usage (the replicas' cached tokens): it asks a stream for its
// usage chunk and takes it out again when the client had not asked; a client that asked gets it.
TEST(Router, CountsUsageAndStripsTheUsageChunkItAskedFor) {
  std::atomic<int> asked{0};
  TestHttpServer replica([&](const ReceivedRequest& r, TestExchange& ex) -> net::awaitable<void> {
    if (r.target == "/health") {
      co_await ex.respond(200, "{}");
      co_return;
    }
    const bool usage = r.body.find("\"include_usage\":true") != std::string::npos;
    asked += usage;
    const std::string u = R"("usage":{"prompt_tokens":10,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":4}})";
    if (r.body.find("\"stream\":true") == std::string::npos) {
      co_await ex.respond(200, "{\"choices\":[{\"text\":\"a\"}]," + u + "}");
      co_return;
    }
    co_await ex.begin_chunked(200, "text/event-stream");
    co_await ex.chunk("data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"cho");  // an event cut in two
    co_await ex.chunk("ices\":[{\"text\":\"b\"}]}\n\n");
    if (usage) co_await ex.chunk("data: {\"choices\":[]," + u + "}\n\n");
    co_await ex.chunk("data: [DONE]\n\n");
    co_await ex.end_chunked();
  });
  Fixture f({&replica});
  auto plain = f.post("/v1/completions", R"({"prompt":"x","stream":true})");
  ASSERT_TRUE(plain) << plain.error().message;
  EXPECT_EQ(plain->body, "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choices\":[{\"text\":\"b\"}]}\n\ndata: [DONE]\n\n");
  auto with = f.post("/v1/completions", R"({"prompt":"x","stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_TRUE(with);
  EXPECT_NE(with->body.find("\"cached_tokens\":4"), std::string::npos) << with->body;
  auto whole = f.post("/v1/completions", R"({"prompt":"x"})");
  ASSERT_TRUE(whole);
  EXPECT_EQ(asked.load(), 2);
  const std::string m = f.router->metrics_text();
  const std::string b = replica.url().to_string();
  EXPECT_NE(m.find("sluice_router_prompt_tokens_total{backend=\"" + b + "\"} 30"), std::string::npos) << m;
  EXPECT_NE(m.find("sluice_router_cached_tokens_total{backend=\"" + b + "\"} 12"), std::string::npos) << m;
}

TEST(Router, SessionKeysStickThroughTheProxyAndApiKeysAreChecked) {
  TestHttpServer a(named("a")), b(named("b")), c(named("c"));
  Fixture f({&a, &b, &c}, "session");
  std::map<std::string, std::string> replica_of;
  for (int round = 0; round < 3; ++round) {
    for (int s = 0; s < 12; ++s) {
      const std::string key = "session-" + std::to_string(s);
      auto r = f.post("/v1/completions", R"({"prompt":"x"})", {{"X-Session-ID", key}});
      ASSERT_TRUE(r) << r.error().message;
      if (round == 0) replica_of[key] = r->body;
      EXPECT_EQ(r->body, replica_of[key]) << key;
    }
  }
  // The body's `user` is the key when no header carries one.
  auto u1 = f.post("/v1/completions", R"({"prompt":"x","user":"carol"})");
  auto u2 = f.post("/v1/completions", R"({"prompt":"y","user":"carol"})");
  ASSERT_TRUE(u1 && u2);
  EXPECT_EQ(u1->body, u2->body);

  RouterConfig keyed;
  keyed.port = 0;
  keyed.api_key = "sesame";
  keyed.backends.push_back(*parse_backend(a.url().to_string()));
  auto r = Router::create(keyed);
  ASSERT_TRUE(r);
  (*r)->start();
  const http::Url url{"127.0.0.1", (*r)->port(), ""};
  http::HttpRequest no_key{.method = "POST", .target = "/v1/completions", .body = R"({"prompt":"x"})"};
  auto refused = http::fetch(url, no_key);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().status, 401);
  http::HttpRequest with_key = no_key;
  with_key.headers.push_back({"Authorization", "Bearer sesame"});
  EXPECT_TRUE(http::fetch(url, with_key));
  EXPECT_FALSE(Router::create(RouterConfig{}));  // no backend
}

}  // namespace
}  // namespace sluice::router
