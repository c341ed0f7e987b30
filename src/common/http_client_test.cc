// HttpConnection against a scripted server: framing, streaming, keep-alive and every error kind.
#include "common/http_client.h"

#include <atomic>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <gtest/gtest.h>

#include "common/http_test_server.h"

namespace sluice::http {
namespace {

namespace net = boost::asio;
using testing::ReceivedRequest;
using testing::TestExchange;
using testing::TestHttpServer;
using namespace std::chrono_literals;

// Runs `make(connection)` on a fresh io_context and returns what it returned.
template <typename Make>
HttpResult<HttpResponse> run_async(const Url& url, HttpOptions options, Make make) {
  net::io_context io;
  HttpConnection connection(io.get_executor(), url, options);
  HttpResult<HttpResponse> out = std::unexpected(HttpError{});
  net::co_spawn(io, make(connection), [&](std::exception_ptr e, HttpResult<HttpResponse> r) {
    if (e) std::rethrow_exception(e);
    out = std::move(r);
  });
  io.run();
  return out;
}

TEST(HttpClient, FirstListedModelReadsAModelListAndItsFingerprint) {
  auto m = first_listed_model(R"({"object":"list","data":[{"id":"qwen","system_fingerprint":"fp_1"},{"id":"b"}]})");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->id, "qwen");
  EXPECT_EQ(m->system_fingerprint, "fp_1");
  auto plain = first_listed_model(R"({"data":[{"id":"llama"}]})");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->system_fingerprint, "");
  for (const char* bad : {"", "not json", "[]", R"({"data":[]})", R"({"data":[{"name":"x"}]})", R"({"data":[{"id":3}]})"}) {
    EXPECT_FALSE(first_listed_model(bad)) << bad;
  }
}

TEST(HttpClient, GetCollectsABodyAndSendsHostAndUserAgent) {
  std::string host, agent, method;
  TestHttpServer server([&](const ReceivedRequest& r, TestExchange& ex) -> net::awaitable<void> {
    host = r.header("host");
    agent = r.header("user-agent");
    method = r.method;
    co_await ex.respond(200, R"({"ok":true})");
  });
  auto r = fetch(server.url(), HttpRequest{.target = "/v1/models"});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, R"({"ok":true})");
  EXPECT_EQ(r->header("CONTENT-TYPE"), "application/json");
  EXPECT_EQ(method, "GET");
  EXPECT_EQ(host, server.url().authority());
  EXPECT_EQ(agent, "sluice");
}

TEST(HttpClient, PostSendsJsonBodyAndHeaders) {
  std::string body, type, auth;
  TestHttpServer server([&](const ReceivedRequest& r, TestExchange& ex) -> net::awaitable<void> {
    body = r.body;
    type = r.header("content-type");
    auth = r.header("authorization");
    co_await ex.respond(201, "");
  });
  auto r = fetch(server.url(), HttpRequest{.method = "POST", .target = "/x", .headers = {{"Authorization", "Bearer k"}},
                                           .body = R"({"a":1})"});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->status, 201);
  EXPECT_EQ(body, R"({"a":1})");
  EXPECT_EQ(type, "application/json");
  EXPECT_EQ(auth, "Bearer k");
}

TEST(HttpClient, HandsEachChunkToTheCallbackAsItArrives) {
  // The server sends the second chunk only once the client has seen the first: a client that
  // waited for more bytes before calling back would leave the server waiting until its limit.
  std::atomic<bool> client_saw_first{false};
  std::atomic<bool> server_gave_up{false};
  TestHttpServer server([&](const ReceivedRequest&, TestExchange& ex) -> net::awaitable<void> {
    co_await ex.begin_chunked(200, "text/event-stream");
    co_await ex.chunk("data: one\n\n");
    for (int i = 0; i < 2000 && !client_saw_first; ++i) co_await ex.sleep(1ms);
    server_gave_up = !client_saw_first;
    co_await ex.chunk("data: two\n\n");
    co_await ex.end_chunked();
  });
  std::vector<std::string> pieces;
  auto r = run_async(server.url(), {}, [&](HttpConnection& c) {
    return c.request(HttpRequest{.method = "POST", .target = "/s", .body = "{}"}, [&](std::string_view piece) {
      pieces.emplace_back(piece);
      client_saw_first = true;
    });
  });
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(r->body.empty());
  EXPECT_FALSE(server_gave_up);
  std::string all;
  for (const auto& p : pieces) all += p;
  EXPECT_EQ(all, "data: one\n\ndata: two\n\n");
  EXPECT_GE(pieces.size(), 2u);
}

TEST(HttpClient, ReadsABodyEndedByClose) {
  TestHttpServer server([&](const ReceivedRequest&, TestExchange& ex) -> net::awaitable<void> {
    co_await ex.write("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end");
    ex.close();
  });
  auto r = fetch(server.url(), HttpRequest{});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->body, "until the end");
}

net::awaitable<HttpResult<HttpResponse>> two_requests(HttpConnection& c) {
  // NOTE: named requests: g++ 12 destroys a braced temporary inside a co_await expression twice.
  HttpRequest first{.target = "/1"}, second{.target = "/2"};
  auto r = co_await c.request(first);
  if (!r) co_return r;
  co_return co_await c.request(second);
}

TEST(HttpClient, KeepsTheConnectionAliveBetweenRequests) {
  TestHttpServer server([&](const ReceivedRequest& r, TestExchange& ex) -> net::awaitable<void> {
    co_await ex.respond(200, r.target);
  });
  auto r = run_async(server.url(), {}, two_requests);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->body, "/2");
  EXPECT_EQ(server.num_connections(), 1);
}

TEST(HttpClient, ResendsOnANewConnectionWhenTheServerDroppedAnIdleOne) {
  // The server answers and closes without saying so (no "Connection: close"); the client finds
  // out only when it sends the second request.
  TestHttpServer server([&](const ReceivedRequest& r, TestExchange& ex) -> net::awaitable<void> {
    co_await ex.respond(200, r.target);
    ex.close();
  });
  auto r = run_async(server.url(), {}, two_requests);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->body, "/2");
  EXPECT_EQ(server.num_connections(), 2);
}

TEST(HttpClient, NonSuccessStatusIsAnErrorWithTheBody) {
  TestHttpServer server([&](const ReceivedRequest&, TestExchange& ex) -> net::awaitable<void> {
    co_await ex.respond(429, R"({"error":{"message":"queue full"}})");
  });
  auto r = fetch(server.url(), HttpRequest{.method = "POST", .target = "/v1/completions", .body = "{}"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::kStatus);
  EXPECT_EQ(r.error().status, 429);
  EXPECT_EQ(r.error().body, R"({"error":{"message":"queue full"}})");
  EXPECT_NE(r.error().message.find("HTTP 429"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("queue full"), std::string::npos) << r.error().message;
  EXPECT_EQ(r.error().to_status().code(), StatusCode::kOverloaded);
}

TEST(HttpClient, ConnectionClosedMidResponseIsAnError) {
  TestHttpServer server([&](const ReceivedRequest&, TestExchange& ex) -> net::awaitable<void> {
    co_await ex.begin_chunked(200, "text/event-stream");
    co_await ex.chunk("data: one\n\n");
    ex.close();
  });
  std::string seen;
  auto r = run_async(server.url(), {}, [&](HttpConnection& c) {
    return c.request(HttpRequest{.target = "/"}, [&](std::string_view piece) { seen += piece; });
  });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::kClosed) << r.error().message;
  EXPECT_EQ(seen, "data: one\n\n");
}

TEST(HttpClient, RefusedConnectionIsAConnectError) {
  uint16_t port = 0;
  {
    TestHttpServer gone([](const ReceivedRequest&, TestExchange&) -> net::awaitable<void> { co_return; });
    port = gone.port();
  }
  auto r = fetch(Url{"127.0.0.1", port, ""}, HttpRequest{});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::kConnect);
  EXPECT_NE(r.error().message.find(fmt::format("127.0.0.1:{}", port)), std::string::npos) << r.error().message;
}

// https to a server that speaks plain HTTP: the TLS handshake fails, a connect error that
// says so (the certificate checks themselves are tested against a real TLS server in
// tests/eval/eval_test.py).
TEST(HttpClient, HttpsToAPlainServerIsATlsConnectError) {
  TestHttpServer server([](const ReceivedRequest&, TestExchange& ex) -> net::awaitable<void> {
    co_await ex.respond(200, "{}");
  });
  Url url = server.url();
  url.tls = true;
  auto r = fetch(url, HttpRequest{}, HttpOptions{.connect_timeout = 2000ms});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::kConnect) << r.error().message;
  EXPECT_NE(r.error().message.find("TLS handshake failed"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("https://127.0.0.1"), std::string::npos) << r.error().message;
}

TEST(HttpClient, SlowResponseTimesOut) {
  TestHttpServer server([&](const ReceivedRequest&, TestExchange& ex) -> net::awaitable<void> {
    co_await ex.sleep(10s);  // cut short when the server is destroyed
  });
  auto r = fetch(server.url(), HttpRequest{}, HttpOptions{.request_timeout = 50ms});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::kTimeout) << r.error().message;
}

net::awaitable<void> cancel_after(HttpConnection& c, std::chrono::milliseconds delay) {
  net::steady_timer timer(co_await net::this_coro::executor, delay);
  co_await timer.async_wait(net::use_awaitable);
  c.cancel();
}

TEST(HttpClient, CancelStopsTheRequestInFlight) {
  TestHttpServer server([&](const ReceivedRequest&, TestExchange& ex) -> net::awaitable<void> {
    co_await ex.begin_chunked(200, "text/event-stream");
    co_await ex.sleep(10s);
  });
  net::io_context io;
  HttpConnection connection(io.get_executor(), server.url());
  HttpResult<HttpResponse> out;
  net::co_spawn(io, connection.request(HttpRequest{.target = "/"}, [](std::string_view) {}),
                [&](std::exception_ptr, HttpResult<HttpResponse> r) { out = std::move(r); });
  net::co_spawn(io, cancel_after(connection, 20ms), net::detached);
  io.run();
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().kind, ErrorKind::kCancelled) << out.error().message;
  EXPECT_FALSE(connection.is_open());
}

}  // namespace
}  // namespace sluice::http
