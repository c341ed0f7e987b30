// The router's HTTP with clients and replicas over scripted replicas on loopback: SSE framing,
// HTTP/1.0 streams, HEAD and Expect, reason phrases and relayed headers, refusals before the
// body, upstream timeouts, routing by model.
#include <cmath>

#include "router/router_impl.h"
#include "router/router_test_fixture.h"

namespace sluice::router {
namespace {

using namespace router_testing;

// `request` written on a new connection to the router, and what comes back to the end (the
// router closes); `ec`, where given, the read's end.
std::string exchange_raw(const Fixture& f, const std::string& request, boost::system::error_code* ec = nullptr) {
  net::io_context io;
  net::ip::tcp::socket s(io);
  s.connect({net::ip::make_address("127.0.0.1"), f.url.port});
  net::write(s, net::buffer(request));
  std::string got;
  boost::system::error_code read_ec;
  net::read(s, net::dynamic_buffer(got), read_ec);
  if (ec) *ec = read_ec;
  return got;
}

// Events end at a blank line however the replica ends its lines: "\r\n\r\n" (sse-starlette's
// default), "\r\r" too. They were split at "\n\n" only: a CRLF stream went out in one piece at
// its end (or per MiB), and its usage chunk, asked for by the router, reached the client.
TEST(Router, StreamsRelayEventByEventWhateverTheirLineEnds) {
  bhttp::request<bhttp::string_body> req(bhttp::verb::post, "/v1/completions", 11);
  Exchange x{req, "", "", "", "", false, true};
  x.strip_usage = true;
  StreamRelay relay(x);
  EXPECT_EQ(relay.take("data: {\"choices\":[{\"text\":\"a\"}],\"usage\":null}\r\n\r\ndata: {\"cho"),
            "data: {\"choices\":[{\"text\":\"a\"}]}\r\n\r\n");
  EXPECT_EQ(relay.take("ices\":[{\"text\":\"b\"}]}\r"), "");  // a CR last may be half of a CRLF
  EXPECT_EQ(relay.take("\n\r\n"), "data: {\"choices\":[{\"text\":\"b\"}]}\r\n\r\n");
  const std::string usage = R"(data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2}})";
  EXPECT_EQ(relay.take(usage + "\r\n\r\n"), "");  // the router's own: taken out
  EXPECT_EQ(x.prompt_tokens, 7);
  EXPECT_EQ(relay.take(": comment\r\rdata: [DONE]\n\n"), ": comment\r\rdata: [DONE]\n\n");
  // A CR-only stream's last event: a CR last could be half of a CRLF until the stream ends; the
  // usage chunk the router asked for is taken out of it then too.
  EXPECT_EQ(relay.take(usage + "\r\r"), "");
  EXPECT_EQ(relay.finish(), "");
  StreamRelay cut(x);
  EXPECT_EQ(cut.take("data: {\"choices\":[]}\r\n\r\ndata: {\"cho"), "data: {\"choices\":[]}\r\n\r\n");
  EXPECT_EQ(cut.finish(), "data: {\"cho");  // an unfinished last event, as it came
}


// An HTTP/1.0 client knows no chunked encoding: its stream comes as plain bytes, ended by close.
TEST(Router, StreamsToAnHttp10ClientWithoutChunks) {
  TestHttpServer a(named("a"));
  Fixture f({&a});
  const std::string body = R"({"prompt":"hi","stream":true})";
  boost::system::error_code ec;
  const std::string got = exchange_raw(f,
                                       fmt::format("POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\n"
                                                   "Content-Length: {}\r\n\r\n{}",
                                                   body.size(), body),
                                       &ec);
  EXPECT_EQ(ec, net::error::eof);
  EXPECT_EQ(got.find("chunked"), std::string::npos) << got;
  EXPECT_NE(got.find("Connection: close"), std::string::npos) << got;
  EXPECT_TRUE(got.ends_with("\r\n\r\ndata: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: [DONE]\n\n")) << got;
}

// The router's own routes answer HEAD with headers alone (a body would be read as the next
// answer on the connection), and a client that waits for "100 Continue" before its body gets it.
TEST(Router, HeadHasNoBodyAndExpectContinueIsAnswered) {
  TestHttpServer a(named("a"));
  const std::string key = "k";
  Fixture f({&a}, "round_robin", {}, [&key](RouterConfig& c) {
    c.api_key = key;
    c.admin_key = "adm";
  });
  net::io_context io;
  auto connect = [&](net::ip::tcp::socket& s) {
    s.connect({net::ip::make_address("127.0.0.1"), f.url.port});
    const timeval limit{5, 0};  // a read that waits past it fails the test rather than hang
    ::setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  };
  net::ip::tcp::socket s(io);
  connect(s);
  boost::system::error_code ec;
  // What the router writes on `s` until `want` has come (or the read fails).
  auto read_until = [&](std::string_view want) {
    std::string got;
    while (got.find(want) == std::string::npos && !ec) {
      char piece[4096];
      got.append(piece, s.read_some(net::buffer(piece), ec));
    }
    return got;
  };
  // The admin API and the dashboard too: a GET route's headers, a POST-only route's 405, a 401.
  net::write(s, net::buffer(std::string("HEAD /health HTTP/1.1\r\nHost: x\r\n\r\nHEAD /nothing HTTP/1.1\r\nHost: x\r\n\r\n"
                                        "HEAD /admin/replicas HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer adm\r\n\r\n"
                                        "HEAD /admin/replicas/drain HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer adm\r\n\r\n"
                                        "HEAD /ui HTTP/1.1\r\nHost: x\r\n\r\nHEAD /ui HTTP/1.1\r\nHost: x\r\n"
                                        "Authorization: Bearer adm\r\n\r\nGET /version HTTP/1.1\r\nHost: x\r\n\r\n")));
  const std::string got = read_until("\"version\"");
  const std::vector<std::string> statuses = {"200 OK", "404 Not Found", "200 OK", "405 Method Not Allowed",
                                             "401 Unauthorized", "200 OK", "200 OK"};
  size_t at = 0;
  for (size_t i = 0; i < statuses.size(); ++i) {
    ASSERT_EQ(got.find("HTTP/1.1 " + statuses[i] + "\r\n", at), at) << i << ": " << got.substr(at);
    at = got.find("\r\n\r\n", at) + 4;  // the next answer starts right after the headers: no body
  }
  EXPECT_TRUE(got.substr(at).starts_with("{\"version\"")) << got;

  const std::string body = R"({"prompt":"hi"})";
  net::write(s, net::buffer(fmt::format("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                        "Authorization: Bearer k\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n",
                                        body.size())));
  EXPECT_EQ(read_until("\r\n\r\n"), "HTTP/1.1 100 Continue\r\n\r\n");  // the body is sent only after it
  net::write(s, net::buffer(body));
  const std::string answer = read_until("{\"replica\":\"a\"}");
  EXPECT_TRUE(answer.starts_with("HTTP/1.1 200 OK\r\n")) << answer;

  // Without the key, the refusal comes instead of "100 Continue": no body is sent for nothing.
  const std::string refused = exchange_raw(f,
                                           "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n"
                                           "Expect: 100-continue\r\n\r\n");
  EXPECT_TRUE(refused.starts_with("HTTP/1.1 401 Unauthorized\r\n")) << refused;
  EXPECT_EQ(refused.find("100 Continue"), std::string::npos) << refused;

  // A 405 of the admin API says which methods the route takes, HEAD among them where GET is.
  for (const auto& [request, allow] :
       {std::pair{"POST /admin/shadow/report", "GET, HEAD"}, std::pair{"DELETE /admin/shadow", "GET, HEAD, POST"},
        std::pair{"DELETE /admin/replicas", "GET, HEAD, POST"}}) {
    const std::string got405 =
        exchange_raw(f, fmt::format("{} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer adm\r\nContent-Length: 0\r\n"
                                    "Connection: close\r\n\r\n",
                                    request));
    EXPECT_TRUE(got405.starts_with("HTTP/1.1 405 Method Not Allowed\r\n")) << got405;
    EXPECT_NE(got405.find(fmt::format("Allow: {}\r\n", allow)), std::string::npos) << got405;
  }
}

// Details of HTTP in what the router answers: reason phrases of every registered code, a
// Retry-After as a date, a 401's challenge, a relayed 405's Allow, a request without Host or in
// a transfer coding it cannot read (or any, in HTTP/1.0), every challenge of a relayed 401.
TEST(Router, AnswersKeepHttpsDetails) {
  EXPECT_EQ(reason(415), "Unsupported Media Type");
  EXPECT_EQ(reason(431), "Request Header Fields Too Large");
  EXPECT_EQ(reason(299), "Status");
  EXPECT_EQ(retry_after_seconds("5"), 5);
  EXPECT_TRUE(std::isinf(retry_after_seconds("soon")));
  EXPECT_EQ(retry_after_seconds("Sun, 06 Nov 1994 08:49:37 GMT"), 0);  // past
  EXPECT_GT(retry_after_seconds("Wed, 21 Oct 2099 07:28:00 GMT"), 1e9);
  TestHttpServer a([](const ReceivedRequest& r, TestExchange& ex) -> net::awaitable<void> {
    if (r.target == "/health") {
      co_await ex.respond(200, "{}");
      co_return;
    }
    if (r.target == "/v1/chat/completions") {
      co_await ex.write("HTTP/1.1 401 X\r\nWWW-Authenticate: Bearer\r\nWWW-Authenticate: Basic realm=\"r\"\r\n"
                        "Content-Length: 2\r\n\r\n{}");
      co_return;
    }
    co_await ex.write("HTTP/1.1 405 X\r\nAllow: POST\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}");
  });
  const std::string key = "k";
  Fixture f({&a}, "round_robin", {}, [&key](RouterConfig& c) { c.api_key = key; });
  auto raw = [&f](const std::string& request) { return exchange_raw(f, request); };
  const std::string no_key = raw("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}");
  EXPECT_TRUE(no_key.starts_with("HTTP/1.1 401 Unauthorized\r\n")) << no_key;
  EXPECT_NE(no_key.find("WWW-Authenticate: Bearer\r\n"), std::string::npos) << no_key;
  const std::string allowed = raw("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n"
                                  "Content-Length: 2\r\nConnection: close\r\n\r\n{}");
  EXPECT_TRUE(allowed.starts_with("HTTP/1.1 405 Method Not Allowed\r\n")) << allowed;
  EXPECT_NE(allowed.find("Allow: POST\r\n"), std::string::npos) << allowed;
  const std::string no_host = raw("GET /version HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(no_host.starts_with("HTTP/1.1 400 Bad Request\r\n")) << no_host;
  // Two Hosts or two keys: the router and the replica could each read another (RFC 9112 3.2).
  for (const char* twice : {"Host: x\r\nHost: y\r\nAuthorization: Bearer k\r\n",
                            "Host: x\r\nAuthorization: Bearer k\r\nAuthorization: Bearer j\r\n"}) {
    const std::string r = raw(fmt::format("POST /v1/completions HTTP/1.1\r\n{}Content-Length: 2\r\n\r\n{{}}", twice));
    EXPECT_TRUE(r.starts_with("HTTP/1.1 400 Bad Request\r\n")) << r;
    EXPECT_NE(r.find("the request has more than one"), std::string::npos) << r;
  }
  const std::string gzip = raw("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n"
                               "Transfer-Encoding: gzip, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n");
  EXPECT_TRUE(gzip.starts_with("HTTP/1.1 501 Not Implemented\r\n")) << gzip;
  const std::string http10 = raw("POST /v1/completions HTTP/1.0\r\nAuthorization: Bearer k\r\n"
                                 "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n");
  EXPECT_TRUE(http10.starts_with("HTTP/1.1 400 Bad Request\r\n")) << http10;
  const std::string challenged = raw("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n"
                                     "Content-Length: 2\r\nConnection: close\r\n\r\n{}");
  EXPECT_TRUE(challenged.starts_with("HTTP/1.1 401 Unauthorized\r\n")) << challenged;
  EXPECT_NE(challenged.find("WWW-Authenticate: Bearer\r\nWWW-Authenticate: Basic realm=\"r\"\r\n"), std::string::npos)
      << challenged;
}

// Without a rollout, a request naming a model goes to the replicas that list it (they answered
// 404 model_not_found on the others, with /v1/models listing the union); one naming no model, or
// one no replica lists, goes anywhere.
TEST(Router, ARequestNamingAModelGoesToTheReplicasThatListIt) {
  auto serving = [](std::string model) {
    return [model](const ReceivedRequest& r, TestExchange& ex) -> net::awaitable<void> {
      if (r.target == "/v1/models") {
        co_await ex.respond(200, R"({"object":"list","data":[{"id":")" + model + R"(","object":"model"}]})");
      } else {
        co_await ex.respond(200, R"({"served":")" + model + R"("})");
      }
    };
  };
  TestHttpServer a(serving("m1")), b(serving("m2"));
  Fixture f({&a, &b}, "round_robin", {}, [](RouterConfig& c) { c.route_by_model = true; });
  // The lists are asked after the first passing health check.
  for (int i = 0; i < 200; ++i) {
    auto r = f.post("/v1/completions", R"({"model":"m2","prompt":"x"})");
    ASSERT_TRUE(r) << r.error().message;
    if (i >= 100 || r->body != R"({"served":"m1"})") break;
    std::this_thread::sleep_for(10ms);
  }
  std::map<std::string, int> named, unnamed, unknown;
  for (int i = 0; i < 8; ++i) ++named[f.post("/v1/completions", R"({"model":"m2","prompt":"x"})")->body];
  for (int i = 0; i < 8; ++i) ++unnamed[f.post("/v1/completions", R"({"prompt":"x"})")->body];
  for (int i = 0; i < 8; ++i) ++unknown[f.post("/v1/completions", R"({"model":"m3","prompt":"x"})")->body];
  EXPECT_EQ(named, (std::map<std::string, int>{{R"({"served":"m2"})", 8}}));
  EXPECT_EQ(unnamed.size(), 2u);
  EXPECT_EQ(unknown.size(), 2u);
}

// A replica that took the request and does not answer within --upstream-timeout is a 504, not
// retried on the others (each would be given the same work, the client waiting each timeout).
// An answer held back for a retry and relayed once every replica gave one names the replica
// whose answer it is, as any relayed answer does.
TEST(Router, AnAnswerRelayedAfterRetriesNamesItsReplica) {
  auto unavailable = [](const ReceivedRequest& r, TestExchange& ex) -> net::awaitable<void> {
    co_await ex.respond(r.target == "/health" ? 200 : 503, "{}");
  };
  TestHttpServer a(unavailable), b(unavailable);
  Fixture f({&a, &b}, "round_robin", {}, [](RouterConfig& c) { c.max_attempts = 2; });
  const std::string got =
      exchange_raw(f, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}");
  EXPECT_TRUE(got.starts_with("HTTP/1.1 503 Service Unavailable\r\n")) << got;
  const bool named = got.find("X-Sluice-Replica: " + a.url().to_string() + "\r\n") != std::string::npos ||
                     got.find("X-Sluice-Replica: " + b.url().to_string() + "\r\n") != std::string::npos;
  EXPECT_TRUE(named) << got;
}

TEST(Router, AnUpstreamTimeoutIsNotRetried) {
  std::atomic<int> asked{0};
  auto slow = [&](const ReceivedRequest& r, TestExchange& ex) -> net::awaitable<void> {
    if (r.target == "/health") {
      co_await ex.respond(200, "{}");
      co_return;
    }
    ++asked;
    net::steady_timer t(co_await net::this_coro::executor, std::chrono::seconds(2));
    co_await t.async_wait(net::as_tuple(net::use_awaitable));
    co_await ex.respond(200, "{}");
  };
  TestHttpServer a(slow), b(slow);
  Fixture f({&a, &b}, "round_robin", {}, [](RouterConfig& rc) { rc.upstream_timeout_seconds = 0.3; });
  auto r = f.post("/v1/completions", R"({"prompt":"x"})");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("HTTP 504: {\"error\":{\"message\":\"no replica answered (1 tried; the last: timeout)"),
            std::string::npos) << r.error().message;
  EXPECT_EQ(asked.load(), 1);
}

}  // namespace
}  // namespace sluice::router
