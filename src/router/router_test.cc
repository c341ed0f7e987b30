// The router over scripted replicas on loopback: relaying (whole and streamed), retries,
// overload, a stream that fails midway, a client that goes away, affinity, and its own routes.
#include "router/router_test_fixture.h"

namespace sluice::router {
namespace {

using namespace router_testing;

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
  // (Up to 10 s: under a loaded make test -j2 the health checks took over 2 s.)
  for (int i = 0; i < 1000 && g.router->backends().num_available() > 0; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(g.router->backends().num_available(), 0);
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
    co_await ex.chunk(
        "data: {\"id\":\"chatcmpl-7\",\"created\":1700000000,\"model\":\"m\",\"choices\":[{\"delta\":{\"content\":"
        "\"partial\"}}]}\n\n");
    ex.close();  // gone without the last chunk
  });
  Fixture f({&broken});
  auto r = f.post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}],"stream":true})");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_NE(r->body.find("partial"), std::string::npos);
  EXPECT_NE(r->body.find("\"finish_reason\":\"error\""), std::string::npos) << r->body;
  EXPECT_TRUE(r->body.ends_with("data: [DONE]\n\n")) << r->body;
  // The error chunk is one of the response's: its id, created and model.
  const size_t last = r->body.rfind("data: {");
  const auto error_chunk = parse_json(r->body.substr(last + 6, r->body.find('\n', last) - last - 6));
  ASSERT_TRUE(error_chunk) << r->body;
  EXPECT_EQ((*error_chunk)["id"], "chatcmpl-7");
  EXPECT_EQ((*error_chunk)["created"], 1700000000);
  EXPECT_EQ((*error_chunk)["model"], "m");
  EXPECT_EQ((*error_chunk)["object"], "chat.completion.chunk");
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

// An answer that is not HTTP (here a Content-Length that is no number) is a protocol error of
// the replica, named so in the 502 and the metrics: not a connection that closed.
TEST(Router, AMalformedAnswerIsAProtocolErrorNotAClose) {
  TestHttpServer garbled([](const ReceivedRequest& r, TestExchange& ex) -> net::awaitable<void> {
    if (r.target == "/health") {
      co_await ex.respond(200, "{}");
      co_return;
    }
    co_await ex.write("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 12abc\r\n\r\n{}");
  });
  Fixture f({&garbled});
  auto r = f.post("/v1/completions", R"({"prompt":"x"})");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().status, 502);
  EXPECT_NE(r.error().body.find("the last: protocol"), std::string::npos) << r.error().body;
  const std::string m = f.router->metrics_text();
  EXPECT_NE(m.find("kind=\"protocol\"} 1\n"), std::string::npos) << m;
  EXPECT_EQ(m.find("kind=\"closed\""), std::string::npos) << m;
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
    // Asked for usage, a stream's chunks carry "usage": null until the usage chunk (OpenAI's form).
    // (Compact, as sluice writes it, then spaced, as Python's json.dumps does.)
    const std::string null_usage = usage ? ",\"usage\":null" : "", spaced = usage ? ", \"usage\": null" : "";
    co_await ex.chunk("data: {\"choices\":[{\"text\":\"a\"}]" + null_usage + "}\n\ndata: {\"cho");  // an event cut in two
    co_await ex.chunk("ices\":[{\"text\":\"b\"}]" + spaced + "}\n\n");
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
  EXPECT_NE(with->body.find("{\"text\":\"a\"}],\"usage\":null}"), std::string::npos) << with->body;
  auto whole = f.post("/v1/completions", R"({"prompt":"x"})");
  ASSERT_TRUE(whole);
  EXPECT_EQ(asked.load(), 2);
  const std::string b = replica.url().to_string();
  const std::string m = metrics_with(f, "sluice_router_prompt_tokens_total{backend=\"" + b + "\"} 30");
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

// The replicas that answer `n` requests in a row (each answer names its replica).
std::map<std::string, int> answers(Fixture& f, int n) {
  std::map<std::string, int> out;
  for (int i = 0; i < n; ++i) {
    auto r = f.post("/v1/completions", R"({"prompt":"x"})");
    EXPECT_TRUE(r) << r.error().message;
    if (r) ++out[r->body];
  }
  return out;
}

TEST(Router, AdminApiAddsDrainsWeighsAndRemovesReplicas) {
  TestHttpServer a(named("a")), b(named("b")), c(named("c"));
  {
    Fixture off({&a});
    auto r = admin(off, "GET", "/admin/replicas");
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().status, 404);
    EXPECT_NE(r.error().body.find("--admin-key"), std::string::npos);
  }
  // No slow start: an added replica takes its full share at once (round_robin follows the ramp).
  Fixture f({&a}, "round_robin", {}, [](RouterConfig& rc) {
    rc.admin_key = "adm";
    rc.health.slow_start_seconds = 0;
  });
  const std::string A = a.url().to_string(), B = b.url().to_string(), C = c.url().to_string();
  auto no_key = admin(f, "GET", "/admin/replicas", "", "");
  ASSERT_FALSE(no_key);
  EXPECT_EQ(no_key.error().status, 401);
  EXPECT_NE(no_key.error().body.find("needs Authorization: Bearer ADMIN_KEY"), std::string::npos) << no_key.error().body;
  auto wrong_key = admin(f, "GET", "/admin/replicas", "", "nope");
  ASSERT_FALSE(wrong_key);
  EXPECT_EQ(wrong_key.error().status, 401);
  EXPECT_NE(wrong_key.error().body.find("refused this key"), std::string::npos) << wrong_key.error().body;

  // Add: answers come from both, 1:1.
  auto added = admin(f, "POST", "/admin/replicas", R"({"url":")" + B + R"(/"})");
  ASSERT_TRUE(added) << added.error().message << added.error().body;
  EXPECT_EQ(added->status, 201);
  EXPECT_EQ((*parse_json(added->body))["source"], "admin");
  EXPECT_EQ(answers(f, 4), (std::map<std::string, int>{{R"({"replica":"a"})", 2}, {R"({"replica":"b"})", 2}}));
  // Bad requests: each says what is wrong.
  struct Bad {
    std::string method, target, body;
    int status;
    std::string says;
  };
  for (const Bad& bad : std::vector<Bad>{
           {"POST", "/admin/replicas", R"({"url":")" + B + R"("})", 409, "there already"},
           {"POST", "/admin/replicas", R"({"url":"https://x:1"})", 400, "https"},
           {"POST", "/admin/replicas", R"({"url":")" + C + R"(","weight":-1})", 400, "weight"},
           {"POST", "/admin/replicas", R"({"url":")" + C + R"(","key":7})", 400, "key"},
           {"POST", "/admin/replicas", R"({"url": )", 400, "the body is not JSON: "},
           {"POST", "/admin/replicas", R"({"url": 1,})", 400, "at byte 11"},
           {"POST", "/admin/shadow", "[1]", 400, "the body must be a JSON object, got array"},
           {"POST", "/admin/replicas", R"({"url":")" + C + R"(","weigth":2})", 400, "unknown field \\\"weigth\\\""},
           {"POST", "/admin/replicas", R"({"weight": 2})", 400, "\\\"url\\\""},
           {"POST", "/admin/replicas/remove", R"({"url":"http://10.9.9.9:1"})", 404, "no replica"},
           {"POST", "/admin/replicas/drain", R"({"url":")" + A + R"(","drain":"yes"})", 400, "drain"},
           {"POST", "/admin/replicas/weight", R"({"url":")" + A + R"("})", 400, "weight"},
           {"POST", "/admin/replicas/weight", R"({"url":")" + A + R"(","weight":1000})", 400, "between"},
           {"GET", "/admin/replicas/remove", "", 405, "takes POST"},
           {"GET", "/admin/nothing", "", 404, "no admin route"},
       }) {
    auto r = admin(f, bad.method, bad.target, bad.body);
    ASSERT_FALSE(r) << bad.target << " " << bad.body;
    EXPECT_EQ(r.error().status, bad.status) << bad.target << " " << bad.body << ": " << r.error().body;
    EXPECT_NE(r.error().body.find(bad.says), std::string::npos) << r.error().body;
  }

  // Drain: a gets nothing new but stays listed; then back.
  ASSERT_TRUE(admin(f, "POST", "/admin/replicas/drain", R"({"url":")" + A + R"("})"));
  EXPECT_EQ(answers(f, 3), (std::map<std::string, int>{{R"({"replica":"b"})", 3}}));
  // A request is counted once its answer is relayed, just after the client has it: wait for it.
  auto listed = admin(f, "GET", "/admin/replicas");
  for (int i = 0; i < 200 && listed && (*parse_json(listed->body))["replicas"][1]["requests"] != 5; ++i) {
    std::this_thread::sleep_for(10ms);
    listed = admin(f, "GET", "/admin/replicas");
  }
  ASSERT_TRUE(listed);
  auto list = *parse_json(listed->body);
  ASSERT_EQ(list["replicas"].size(), 2u) << listed->body;
  EXPECT_EQ(list["replicas"][0]["state"], "draining");
  EXPECT_EQ(list["replicas"][1]["requests"], 5);
  ASSERT_TRUE(admin(f, "POST", "/admin/replicas/drain", R"({"url":")" + A + R"(","drain":false})"));
  // Weight 3: three of every four.
  ASSERT_TRUE(admin(f, "POST", "/admin/replicas/weight", R"({"url":")" + A + R"(","weight":3})"));
  EXPECT_EQ(answers(f, 8), (std::map<std::string, int>{{R"({"replica":"a"})", 6}, {R"({"replica":"b"})", 2}}));
  EXPECT_NE(f.router->metrics_text().find("sluice_router_backend_weight{backend=\"" + A + "\",source=\"static\"} 3"),
            std::string::npos);

  // Remove b, add c: c takes b's slot, and none of b's idle connections (answers say c, never b).
  auto removed = admin(f, "POST", "/admin/replicas/remove", R"({"url":")" + B + R"("})");
  ASSERT_TRUE(removed) << removed.error().body;
  EXPECT_EQ((*parse_json(removed->body))["removed"], true);
  EXPECT_EQ(f.router->metrics_text().find(B), std::string::npos) << "b's series went with it";
  ASSERT_TRUE(admin(f, "POST", "/admin/replicas/weight", R"({"url":")" + A + R"(","weight":1})"));
  ASSERT_TRUE(admin(f, "POST", "/admin/replicas", R"({"url":")" + C + R"("})"));
  EXPECT_EQ(answers(f, 4), (std::map<std::string, int>{{R"({"replica":"a"})", 2}, {R"({"replica":"c"})", 2}}));
  EXPECT_EQ(f.router->backends().size(), 2u);
}

// A replica removed while it answers a request: the request completes there, nothing new goes there.
TEST(Router, ARemovedReplicaFinishesItsRequestsInFlight) {
  std::atomic<int> started{0};
  TestHttpServer slow([&](const ReceivedRequest& r, TestExchange& ex) -> net::awaitable<void> {
    if (r.target == "/health") {
      co_await ex.respond(200, "{}");
      co_return;
    }
    ++started;
    net::steady_timer t(co_await net::this_coro::executor, 300ms);
    co_await t.async_wait(net::use_awaitable);
    co_await ex.respond(200, R"({"replica":"slow"})");
  });
  TestHttpServer other(named("other"));
  Fixture f({&slow, &other}, "round_robin", {}, [](RouterConfig& rc) { rc.admin_key = "adm"; });
  http::HttpResult<http::HttpResponse> first = std::unexpected(http::HttpError{});
  std::thread client([&] { first = f.post("/v1/completions", R"({"prompt":"x"})"); });
  while (started.load() == 0) std::this_thread::sleep_for(5ms);
  ASSERT_TRUE(admin(f, "POST", "/admin/replicas/remove", R"({"url":")" + slow.url().to_string() + R"("})"));
  EXPECT_EQ(answers(f, 3), (std::map<std::string, int>{{R"({"replica":"other"})", 3}}));
  client.join();
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_EQ(first->body, R"({"replica":"slow"})");
  EXPECT_EQ(started.load(), 1);
  // Its series went with it and are not made again by the request that ended after.
  EXPECT_EQ(f.router->metrics_text().find(slow.url().to_string()), std::string::npos) << f.router->metrics_text();
}

// --discover dns:localhost:PORT: the replica is found by name; a name that does not resolve
// leaves the pool as it is, counted as a failed lookup.
TEST(Router, DiscoversReplicasByDns) {
  TestHttpServer a(named("a"));
  Fixture f({}, "round_robin", {}, [&](RouterConfig& rc) {
    rc.discover.push_back(*parse_discovery("dns:localhost:" + std::to_string(a.port())));
    rc.discover.push_back(*parse_discovery("dns:no-such-replica.invalid:8000"));
    rc.discover_interval_seconds = 0.1;
    rc.connect_timeout_seconds = 0.5;
  });
  std::string m;
  for (int i = 0; i < 400; ++i) {
    m = f.router->metrics_text();
    if (m.find("name=\"dns:no-such-replica.invalid:8000\",result=\"error\"} ") != std::string::npos &&
        m.find("sluice_router_backend_up{backend=\"" + a.url().to_string() + "\"} 1") != std::string::npos) {
      break;
    }
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_NE(m.find("sluice_router_backend_weight{backend=\"" + a.url().to_string() + "\",source=\"dns\"} 1"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("name=\"dns:no-such-replica.invalid:8000\",result=\"error\"} "), std::string::npos) << m;
  EXPECT_EQ(m.find("name=\"dns:no-such-replica.invalid:8000\",result=\"ok\"} 1"), std::string::npos) << m;
  // localhost may also list ::1, where nothing listens: a retry (or its health checks) takes care of it.
  for (int i = 0; i < 4; ++i) {
    auto r = f.post("/v1/completions", R"({"prompt":"x"})");
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->body, R"({"replica":"a"})");
  }
  RouterConfig only_discovery;
  only_discovery.port = 0;
  only_discovery.discover.push_back(*parse_discovery("dns:localhost:1"));
  EXPECT_TRUE(Router::create(only_discovery)) << "discovery alone is enough to start";
}

// Usage per group: the X-Session-Group header, else session or none; past the bound, other.
TEST(Router, CountsUsagePerGroup) {
  TestHttpServer replica([&](const ReceivedRequest& r, TestExchange& ex) -> net::awaitable<void> {
    if (r.target == "/health") {
      co_await ex.respond(200, "{}");
      co_return;
    }
    co_await ex.respond(200, R"({"usage":{"prompt_tokens":10,"prompt_tokens_details":{"cached_tokens":3}}})");
  });
  Fixture f({&replica}, "round_robin", {}, [](RouterConfig& rc) { rc.max_usage_groups = 3; });
  const std::vector<std::vector<http::Header>> requests = {
      {{"X-Session-Group", "team-a"}}, {{"X-Session-Group", "team-a"}}, {{"X-Session-ID", "s1"}}, {},
      {{"X-Session-Group", "team-b"}}, {{"X-Session-Group", "team-c"}}};
  for (const auto& headers : requests) ASSERT_TRUE(f.post("/v1/completions", R"({"prompt":"x"})", headers));
  const std::string m = metrics_with(f, "sluice_router_group_prompt_tokens_total{group=\"other\"} 20");
  for (const auto& [group, prompt, cached] : std::vector<std::tuple<std::string, int, int>>{
           {"team-a", 20, 6}, {"session", 10, 3}, {"none", 10, 3}, {"other", 20, 6}}) {
    EXPECT_NE(m.find(fmt::format("sluice_router_group_prompt_tokens_total{{group=\"{}\"}} {}", group, prompt)),
              std::string::npos)
        << group << "\n" << m;
    EXPECT_NE(m.find(fmt::format("sluice_router_group_cached_tokens_total{{group=\"{}\"}} {}", group, cached)),
              std::string::npos)
        << group;
  }
}

// Requests in flight at once with new group names take no more than the cap between them: a
// name is taken when its request arrives, not when its answer's usage is counted.
TEST(Router, ConcurrentNewGroupsStayWithinTheCap) {
  std::atomic<bool> open{false};
  std::atomic<int> arrived{0};
  TestHttpServer replica([&](const ReceivedRequest& r, TestExchange& ex) -> net::awaitable<void> {
    if (r.target == "/health") {
      co_await ex.respond(200, "{}");
      co_return;
    }
    ++arrived;
    for (int i = 0; i < 1000 && !open.load(); ++i) co_await ex.sleep(10ms);
    co_await ex.respond(200, R"({"usage":{"prompt_tokens":10}})");
  });
  Fixture f({&replica}, "round_robin", {}, [](RouterConfig& rc) { rc.max_usage_groups = 1; });
  std::vector<std::thread> clients;
  for (int i = 0; i < 6; ++i) {
    clients.emplace_back([&f, i] { ASSERT_TRUE(f.post("/v1/completions", R"({"prompt":"x"})", {{"X-Session-Group", fmt::format("g{}", i)}})); });
  }
  for (int i = 0; i < 500 && arrived.load() < 6; ++i) std::this_thread::sleep_for(10ms);
  open = true;
  for (std::thread& t : clients) t.join();
  // Usage is counted just after each client has its answer: wait for all six (60 tokens).
  std::string m;
  int groups = 0;
  for (int i = 0; i < 500; ++i) {
    m = metrics_with(f, "sluice_router_group_prompt_tokens_total{group=\"other\"} 50");
    groups = 0;
    for (size_t at = 0; (at = m.find("sluice_router_group_prompt_tokens_total{group=", at)) != std::string::npos;
         ++at) {
      ++groups;
    }
    if (groups >= 2) break;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(groups, 2) << m;  // one named group and "other"
  EXPECT_NE(m.find("sluice_router_group_prompt_tokens_total{group=\"other\"} 50"), std::string::npos) << m;
}

}  // namespace
}  // namespace sluice::router
