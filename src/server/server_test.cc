// The HTTP server in-process, over raw sockets: hostile bytes, overload, disconnects,
// pipelining, timeouts, half-closes, HTTP/1.0, framing, CORS, the drain. (What the API answers
// is in openai_api_test.cc; real clients are exercised in tests/clients.)
#include <chrono>
#include <random>
#include <thread>

#include "server/server_test_fixture.h"

namespace sluice::server {
namespace {

using namespace server_testing;

TEST_F(ServerTest, KeepAliveAndPipelining) {
  Connection c(server_->port());
  const std::string body = R"({"prompt": "a b", "max_tokens": 3, "temperature": 0})";
  // Two requests in one write: the second is answered after the first, on the same connection.
  c.send(post("/v1/completions", body, /*keep_alive=*/true) + post("/v1/completions", body, /*keep_alive=*/false));
  const std::string r = c.read_all();
  const size_t first = r.find("HTTP/1.1 200 OK"), second = r.find("HTTP/1.1 200 OK", first + 1);
  ASSERT_NE(first, std::string::npos) << r;
  ASSERT_NE(second, std::string::npos) << r;
  // Greedy: both texts are the same.
  auto text_of = [&](size_t from) {
    const size_t b = r.find("\"text\":", from);
    return r.substr(b, r.find("\"logprobs\"", b) - b);
  };
  EXPECT_EQ(text_of(first), text_of(second));
}

TEST_F(ServerTest, HostileBytesNeverCrashOrHang) {
  std::vector<std::string> inputs = {
      "\r\n\r\n",
      "GARBAGE\r\n\r\n",
      "GET / HTTP/9.9\r\n\r\n",
      "POST /v1/completions HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
      "POST /v1/completions HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
      "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
      "POST /v1/completions HTTP/1.1\r\nContent-Length: 10\r\n\r\n{\"pr",  // cut short: idle timeout
      "POST /v1/completions HTTP/1.1\r\nContent-Length: 5000\r\n\r\n",   // over the body limit: 413
      "GET /health HTTP/1.1\r\nX: " + std::string(70000, 'a') + "\r\n\r\n",  // header over the limit
      "GET /" + std::string(10000, '/') + " HTTP/1.1\r\n\r\n",
      post("/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"\\ud800\"}]}"),
      post("/v1/completions", std::string(3000, '[')),
  };
  std::mt19937 rng(99);
  for (int i = 0; i < 150; ++i) {
    std::string s = post("/v1/completions", R"({"prompt": "x", "max_tokens": 2})");
    for (int k = 0; k < 1 + static_cast<int>(rng() % 6); ++k) s[rng() % s.size()] = static_cast<char>(rng() % 256);
    inputs.push_back(std::move(s));
  }
  int answered = 0;
  for (const std::string& in : inputs) {
    Connection c(server_->port());
    ASSERT_TRUE(c.connected());
    c.send(in);
    const std::string r = c.read_all();
    answered += r.starts_with("HTTP/1.1 ");
  }
  EXPECT_GT(answered, 100);
  expect_healthy();
  wait_engine_idle();
}

TEST_F(ServerTest, OverloadGets429WithRetryAfter) {
  // max_num_seqs 2 and max_queued_requests 2: of 6 long requests at once, some are refused.
  std::vector<std::unique_ptr<Connection>> conns;
  const std::string body = R"({"prompt": "long", "max_tokens": 1500, "ignore_eos": true})";
  for (int i = 0; i < 6; ++i) {
    conns.push_back(std::make_unique<Connection>(server_->port()));
    conns.back()->send(post("/v1/completions", body));
  }
  // Running and queued requests answer only when done; refusals come at once. How many are
  // refused depends on how far the engine got when they arrived: at least the 2 over
  // running + queued, at most the 4 after the first two (which count as queued until a step).
  int refused = 0;
  for (auto& c : conns) {
    c->set_timeout(500);
    std::string r = c->read_until("\r\n\r\n");
    if (r.starts_with("HTTP/1.1 429")) {
      ++refused;
      EXPECT_NE(r.find("Retry-After: 1\r\n"), std::string::npos) << r;
      EXPECT_NE(r.find("overloaded"), std::string::npos) << r;
    }
  }
  EXPECT_GE(refused, 2);
  EXPECT_LE(refused, 4);
  conns.clear();  // the others hang up: those still running are cancelled
  wait_engine_idle();
  // A fast machine may finish a request of 1500 tokens before its client hangs up: every
  // accepted request ended by its length or by a cancel, and each cancel counted as a disconnect.
  const EngineMetrics m = engine_->metrics();
  const int64_t cancelled = m.num_requests_finished[static_cast<int>(FinishReason::kCancelled)];
  EXPECT_EQ(cancelled + m.num_requests_finished[static_cast<int>(FinishReason::kLength)], 6 - refused);
  EXPECT_EQ(server_->http_metrics().client_disconnects, cancelled);
  expect_healthy();
}

TEST_F(ServerTest, DisconnectDuringNonStreamingRequestCancelsIt) {
  {
    Connection c(server_->port());
    c.send(post("/v1/completions", R"({"prompt": "x", "max_tokens": 1800, "ignore_eos": true})"));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }  // closed while the request runs
  wait_engine_idle();
  const EngineMetrics m = engine_->metrics();
  EXPECT_EQ(m.num_requests_finished[static_cast<int>(FinishReason::kCancelled)], 1);
  EXPECT_EQ(server_->http_metrics().client_disconnects, 1);
}

// The idle timeout (0.5 s here) is about silence, not about how long a request takes to arrive.
TEST_F(ServerTest, SlowBodyIsNotCutButSilenceIs) {
  const std::string request = post("/v1/completions", R"({"prompt": "a b", "max_tokens": 2, "temperature": 0})");
  Connection c(server_->port());
  const size_t header_end = request.find("\r\n\r\n") + 4;
  c.send(request.substr(0, header_end));
  for (size_t i = header_end; i < request.size(); i += 8) {  // ~2.4 s in all, 0.3 s between pieces
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    c.send(request.substr(i, 8));
    if (i > header_end + 48) break;
  }
  c.send(request.substr(std::min(request.size(), header_end + 56)));
  const std::string r = c.read_all();
  EXPECT_TRUE(r.starts_with("HTTP/1.1 200")) << r;

  Connection silent(server_->port());
  silent.send(request.substr(0, header_end + 3));
  EXPECT_EQ(silent.read_all(), "");  // closed after 0.5 s without a byte
}

TEST_F(ServerTest, HeadersMustArriveWithinTheHeaderTimeout) {
  ServerConfig sc;
  sc.idle_timeout_seconds = 5;
  sc.header_timeout_seconds = 0.8;
  auto srv = make_server(sc);
  Connection c(srv->port());
  const std::string head = "GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + std::string(40, 'a');
  bool closed = false;
  for (size_t i = 0; i < head.size() && !closed; ++i) {  // a byte every 50 ms: never idle, never done
    c.send(head.substr(i, 1));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    closed = i * 50 > 1500;
  }
  c.send("\r\n\r\n");
  EXPECT_EQ(c.read_all(), "");
  EXPECT_EQ(srv->http_metrics().request_timeouts, 1);
  // Empty lines before a request are skipped, within the header timeout...
  Connection blank(srv->port());
  blank.send("\r\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  blank.send("\r\nGET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const std::string r = blank.read_all();
  EXPECT_TRUE(r.starts_with("HTTP/1.1 200")) << r;
  // ...but they hold no connection past it (a client sending only them would hold it for ever,
  // each line within the 5 s idle timeout); that end is an idle close, not a timed-out request.
  Connection blanks(srv->port());
  for (int i = 0; i < 6; ++i) {
    blanks.send("\r\n");
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  blanks.send("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(blanks.read_all(), "");
  EXPECT_EQ(srv->http_metrics().request_timeouts, 1);
  srv->request_shutdown();
  srv->run_until_shutdown();
}

// shutdown(SHUT_WR) after the request (nc -N): the client still reads, so it gets its answer,
// streamed or not.
TEST_F(ServerTest, HalfClosedClientGetsItsResponse) {
  const std::string plain = R"({"prompt": "a b", "max_tokens": 40, "ignore_eos": true, "temperature": 0})";
  const std::string streamed = R"({"prompt": "a b", "max_tokens": 40, "ignore_eos": true, "temperature": 0, "stream": true})";
  for (const std::string& body : {plain, streamed}) {
    Connection c(server_->port());
    c.send(post("/v1/completions", body, /*keep_alive=*/true));
    c.half_close();
    const std::string r = c.read_all();
    ASSERT_NE(r.find("HTTP/1.1 200 OK"), std::string::npos) << r;
    if (body == streamed) {
      EXPECT_NE(r.find("data: [DONE]"), std::string::npos) << r;
    } else {
      EXPECT_NE(r.find(R"("finish_reason":"length")"), std::string::npos) << r;
      EXPECT_NE(r.find(R"("completion_tokens":40)"), std::string::npos) << r;
    }
  }
  wait_engine_idle();
  EXPECT_EQ(server_->http_metrics().client_disconnects, 0);
  EXPECT_EQ(engine_->metrics().num_requests_finished[static_cast<int>(FinishReason::kCancelled)], 0);
}

// A body shorter than its Content-Length, then a half-close: the client is told, not hung up on.
TEST_F(ServerTest, BodyCutShortByAHalfCloseIsA400) {
  Connection c(server_->port());
  c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
         R"({"prompt": "a")");
  c.half_close();
  const std::string r = c.read_all();
  EXPECT_TRUE(r.starts_with("HTTP/1.1 400")) << "[" << r << "]";
  EXPECT_NE(r.find("the request body ended before the length its header declared"), std::string::npos) << r;
}

// Two pipelined requests, then a half-close: both are answered.
TEST_F(ServerTest, PipelinedRequestsBeforeAHalfCloseAreAllAnswered) {
  Connection c(server_->port());
  const std::string body = R"({"prompt": "a b", "max_tokens": 8, "temperature": 0})";
  c.send(post("/v1/completions", body, /*keep_alive=*/true) + post("/v1/completions", body, /*keep_alive=*/true));
  c.half_close();
  const std::string r = c.read_all();
  const size_t first = r.find("HTTP/1.1 200 OK");
  ASSERT_NE(first, std::string::npos) << r;
  EXPECT_NE(r.find("HTTP/1.1 200 OK", first + 1), std::string::npos) << r;
}

// Bytes that arrive while a request generates (the next pipelined request; an HTTP/1.0
// client's half-close) leave its answer whole: the session once lost itself then, and the
// client got a reset and the server an in-flight request forever.
TEST_F(ServerTest, BytesSentDuringAGenerationLeaveItsAnswerWhole) {
  // 200 tokens take over 10 s under TSan on a loaded machine: wait long for the whole answer.
  constexpr int kSlowBuildMs = 120'000;
  const std::string body = R"({"prompt": "a b", "max_tokens": 200, "ignore_eos": true, "temperature": 0})";
  {
    Connection c(server_->port());
    c.set_timeout(kSlowBuildMs);
    c.send(post("/v1/completions", body, /*keep_alive=*/true));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    c.send(post("/v1/completions", R"({"prompt": "a", "max_tokens": 2})", /*keep_alive=*/false));
    const std::string r = c.read_all();
    const size_t first = r.find("HTTP/1.1 200 OK");
    ASSERT_NE(first, std::string::npos) << r;
    EXPECT_NE(r.find("HTTP/1.1 200 OK", first + 1), std::string::npos) << r;
  }
  {
    // A stray CRLF after the body (some clients send one), then the next request.
    Connection c(server_->port());
    c.set_timeout(kSlowBuildMs);
    c.send(post("/v1/completions", body, /*keep_alive=*/true));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    c.send("\r\n");
    c.send(post("/v1/completions", R"({"prompt": "a", "max_tokens": 2})", /*keep_alive=*/false));
    const std::string r = c.read_all();
    const size_t first = r.find("HTTP/1.1 200 OK");
    ASSERT_NE(first, std::string::npos) << r;
    EXPECT_NE(r.find("HTTP/1.1 200 OK", first + 1), std::string::npos) << r;
    EXPECT_NE(r.find("\"completion_tokens\":200"), std::string::npos) << r;
  }
  Connection old(server_->port());
  old.set_timeout(kSlowBuildMs);
  old.send(fmt::format("POST /v1/completions HTTP/1.0\r\nContent-Length: {}\r\n\r\n{}", body.size(), body));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  old.half_close();
  const std::string r = old.read_all();
  EXPECT_TRUE(r.starts_with("HTTP/1.1 200")) << r;
  EXPECT_NE(r.find("\"completion_tokens\":200"), std::string::npos) << r;
}

// An HTTP/1.0 client that asks for keep-alive is told it is kept (else it takes a close), and
// its next request is answered on the same connection; one that does not ask gets a close.
TEST_F(ServerTest, Http10KeepAliveIsSaid) {
  Connection c(server_->port());
  c.send("GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  const std::string first = c.read_until("\r\n\r\n");
  EXPECT_NE(first.find("Connection: keep-alive\r\n"), std::string::npos) << first;
  c.send("GET /health HTTP/1.0\r\n\r\n");
  const std::string second = c.read_all();
  EXPECT_NE(second.find("HTTP/1.1 200"), std::string::npos) << second;
  EXPECT_NE(second.find("Connection: close\r\n"), std::string::npos) << second;
}

TEST_F(ServerTest, Http10StreamsAreUnframedAndEndWithTheConnection) {
  const std::string body = R"({"prompt": "a b", "max_tokens": 4, "temperature": 0, "stream": true})";
  const std::string r = exchange(fmt::format("POST /v1/completions HTTP/1.0\r\nContent-Length: {}\r\n\r\n{}",
                                             body.size(), body));
  EXPECT_TRUE(r.starts_with("HTTP/1.1 200")) << r;
  EXPECT_EQ(r.find("Transfer-Encoding"), std::string::npos) << r;
  EXPECT_TRUE(body_of(r).starts_with("data: {")) << r;  // no chunk size in front
  EXPECT_TRUE(r.ends_with("data: [DONE]\n\n")) << r;
}

TEST_F(ServerTest, ExpectContinueIsRefusedBeforeTheBodyWhenTheHeaderSuffices) {
  Connection c(server_->port());
  c.send("POST /v1/nowhere HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n");
  const std::string r = c.read_all();
  EXPECT_TRUE(r.starts_with("HTTP/1.1 404")) << r;  // no "100 Continue" first
  Connection ok(server_->port());
  const std::string body = R"({"prompt": "a", "max_tokens": 1})";
  ok.send(fmt::format("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nExpect: 100-continue\r\n"
                      "Connection: close\r\n\r\n",
                      body.size()));
  EXPECT_TRUE(ok.read_until("\r\n\r\n").starts_with("HTTP/1.1 100 Continue")) ;
  ok.send(body);
  EXPECT_NE(ok.read_all().find("HTTP/1.1 200 OK"), std::string::npos);
}

// A streaming client that stops reading: its request is cancelled once the unwritten stream
// passes the bound, and the buffered bytes are released.
TEST_F(ServerTest, StreamingClientThatStopsReadingIsCancelled) {
  ServerConfig sc;
  sc.max_stream_buffer_bytes = 16 << 10;
  sc.send_buffer_bytes = 4096;  // else the kernel takes the whole answer off the server's hands
  auto srv = make_server(sc);
  Connection c(srv->port(), /*rcvbuf=*/2048);
  c.send(post("/v1/completions", R"({"prompt": "a", "max_tokens": 1900, "ignore_eos": true, "stream": true, "logprobs": 5})"));
  // Never reads (after the first bytes: the request was accepted).
  c.set_timeout(2000);
  const std::string first = c.read_until("data: ");
  ASSERT_TRUE(first.starts_with("HTTP/1.1 200")) << first;
  wait_engine_idle();
  EXPECT_EQ(engine_->metrics().num_requests_finished[static_cast<int>(FinishReason::kCancelled)], 1);
  EXPECT_EQ(srv->http_metrics().slow_client_cancels, 1);
  const std::string metrics = get("/metrics", srv->port());
  EXPECT_NE(metrics.find("sluice_http_slow_client_cancels_total 1\n"), std::string::npos);
  EXPECT_NE(metrics.find("sluice_http_buffered_bytes 0\n"), std::string::npos) << metrics;
  srv->request_shutdown();
  srv->run_until_shutdown();
}

// An answer within the stream bound waits for its client, but not forever: a write the client
// takes nothing of for write_timeout_seconds closes the connection and frees the bytes.
TEST_F(ServerTest, AClientThatTakesNothingOfItsAnswerIsClosedAtTheWriteTimeout) {
  ServerConfig sc;
  sc.send_buffer_bytes = 4096;
  sc.write_timeout_seconds = 0.3;
  auto srv = make_server(sc);
  Connection c(srv->port(), /*rcvbuf=*/2048);
  c.send(post("/v1/completions", R"({"prompt": "a", "max_tokens": 200, "ignore_eos": true, "stream": true, "logprobs": 5})"));
  c.set_timeout(2000);
  ASSERT_TRUE(c.read_until("data: ").starts_with("HTTP/1.1 200"));
  // Never reads again.
  for (int i = 0; i < 500 && srv->http_metrics().write_timeouts == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(srv->http_metrics().write_timeouts, 1);
  EXPECT_EQ(srv->http_metrics().slow_client_cancels, 0);  // the answer was within the bound
  EXPECT_EQ(srv->http_metrics().client_disconnects, 0);   // counted once, as a write timeout
  wait_engine_idle();
  const std::string metrics = get("/metrics", srv->port());
  EXPECT_NE(metrics.find("sluice_http_write_timeouts_total 1\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("sluice_http_buffered_bytes 0\n"), std::string::npos) << metrics;
  srv->request_shutdown();
  srv->run_until_shutdown();
}

TEST_F(ServerTest, CorsPreflightForAllowedOriginsOnly) {
  ServerConfig sc;
  sc.allowed_origins = {"http://app.example"};
  sc.api_key = "k";  // a preflight carries no credentials and must not need them
  auto srv = make_server(sc);
  auto preflight = [&](std::string_view origin) {
    return exchange(fmt::format("OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: x\r\nOrigin: {}\r\n"
                                "Access-Control-Request-Method: POST\r\n"
                                "Access-Control-Request-Headers: authorization, content-type\r\nConnection: close\r\n\r\n",
                                origin),
                    srv->port());
  };
  const std::string ok = preflight("http://app.example");
  EXPECT_TRUE(ok.starts_with("HTTP/1.1 204")) << ok;
  EXPECT_NE(ok.find("Access-Control-Allow-Origin: http://app.example\r\n"), std::string::npos) << ok;
  EXPECT_NE(ok.find("Access-Control-Allow-Methods: POST, OPTIONS\r\n"), std::string::npos) << ok;
  EXPECT_NE(ok.find("Access-Control-Allow-Headers: authorization, content-type\r\n"), std::string::npos) << ok;
  const std::string refused = preflight("http://evil.example");
  EXPECT_TRUE(refused.starts_with("HTTP/1.1 403")) << refused;
  EXPECT_EQ(refused.find("Access-Control-Allow-Origin"), std::string::npos) << refused;
  // Actual requests from the allowed origin carry the header; others do not.
  EXPECT_NE(get("/health", srv->port(), "Origin: http://app.example\r\n").find("Access-Control-Allow-Origin: http://app.example"),
            std::string::npos);
  EXPECT_EQ(get("/health", srv->port(), "Origin: http://evil.example\r\n").find("Access-Control-Allow-Origin"),
            std::string::npos);
  // An error answered before the body (a body over the limit) carries it too: the browser reads it.
  const std::string big = exchange("POST /v1/completions HTTP/1.1\r\nHost: x\r\nOrigin: http://app.example\r\n"
                                   "Authorization: Bearer k\r\nContent-Length: 99999999\r\n\r\n{",
                                   srv->port());
  EXPECT_TRUE(big.starts_with("HTTP/1.1 413")) << big;
  EXPECT_NE(big.find("Access-Control-Allow-Origin: http://app.example"), std::string::npos) << big;
  srv->request_shutdown();
  srv->run_until_shutdown();
  // Without --allowed-origins no origin is allowed.
  EXPECT_EQ(get("/health", 0, "Origin: http://app.example\r\n").find("Access-Control-Allow-Origin"), std::string::npos);
}

// RFC 9112's framing rules: empty lines before the request line are skipped; no Host on
// HTTP/1.1 is a 400, a transfer coding other than chunked a 501, a compressed body a 415 --
// each answered before the body is read, with the connection closed.
TEST_F(ServerTest, HeadsFollowHttp11FramingRules) {
  const std::string after_blank = exchange("\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(after_blank.starts_with("HTTP/1.1 200")) << after_blank;
  const std::string body = R"({"prompt": "a", "max_tokens": 1})";
  const std::string no_host = exchange(fmt::format("POST /v1/completions HTTP/1.1\r\nContent-Length: {}\r\n\r\n{}",
                                                   body.size(), body));
  EXPECT_TRUE(no_host.starts_with("HTTP/1.1 400")) << no_host;
  EXPECT_NE(no_host.find("needs a Host header"), std::string::npos) << no_host;
  const std::string gzip_chunked = exchange(
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n5\r\nxxxxx\r\n0\r\n\r\n");
  EXPECT_TRUE(gzip_chunked.starts_with("HTTP/1.1 501")) << gzip_chunked;
  EXPECT_NE(gzip_chunked.find("Transfer-Encoding 'gzip, chunked' is not supported"), std::string::npos) << gzip_chunked;
  const std::string compressed = exchange(fmt::format(
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n{}", body.size(), body));
  EXPECT_TRUE(compressed.starts_with("HTTP/1.1 415")) << compressed;
  // Two Host or Authorization headers: 400; HTTP/1.0 with a transfer coding: 400.
  for (const char* head : {"Host: x\r\nHost: y\r\n", "Host: x\r\nAuthorization: Bearer a\r\nAuthorization: Bearer b\r\n"}) {
    const std::string twice = exchange(fmt::format("GET /health HTTP/1.1\r\n{}Connection: close\r\n\r\n", head));
    EXPECT_TRUE(twice.starts_with("HTTP/1.1 400")) << twice;
    EXPECT_NE(twice.find("more than one"), std::string::npos) << twice;
  }
  EXPECT_TRUE(exchange("POST /v1/completions HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
                  .starts_with("HTTP/1.1 400"));
  // A request line ended by a bare LF, or HTTP/2's preface: 400 saying what is served.
  for (const char* head : {"GET /health HTTP/1.1\nHost: x\n\n", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"}) {
    const std::string refused = exchange(head);
    EXPECT_TRUE(refused.starts_with("HTTP/1.1 400")) << refused;
    EXPECT_NE(refused.find("the request line must be METHOD TARGET HTTP/1.1 (or HTTP/1.0) ending in CRLF"),
              std::string::npos)
        << refused;
  }
  // The absolute form of a target (RFC 9112 section 3.2.2) reaches its route.
  EXPECT_TRUE(exchange("GET http://localhost:8000/health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                  .starts_with("HTTP/1.1 200"));
  // HTTP/1.0 has no Host requirement; chunked alone is read as before.
  EXPECT_TRUE(exchange(fmt::format("POST /v1/completions HTTP/1.0\r\nContent-Length: {}\r\n\r\n{}", body.size(), body))
                  .starts_with("HTTP/1.1 200"));
  const std::string chunked = exchange(fmt::format(
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\n{}\r\n0\r\n\r\n",
      body.size(), body));
  EXPECT_TRUE(chunked.starts_with("HTTP/1.1 200")) << chunked;
  expect_healthy();
  wait_engine_idle();
}

// While draining, the listener stays open and /health says 503, so a load balancer stops
// sending, and /metrics still answers; a second signal ends the drain at once, cancelling what
// still runs.
TEST_F(ServerTest, DrainAnswers503ThenASecondSignalCancels) {
  ServerConfig sc;
  sc.drain_seconds = 60;
  auto srv = make_server(sc);
  Connection running(srv->port());
  running.send(post("/v1/completions", R"({"prompt": "x", "max_tokens": 1900, "ignore_eos": true})"));
  while (engine_->metrics().num_running == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  srv->request_shutdown();
  std::thread drain([&] { srv->run_until_shutdown(); });
  std::string health;
  for (int i = 0; i < 200 && !health.starts_with("HTTP/1.1 503"); ++i) {
    health = get("/health", srv->port());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(health.starts_with("HTTP/1.1 503")) << health;
  EXPECT_NE(health.find(R"({"status":"draining"})"), std::string::npos) << health;
  const std::string refused = exchange(post("/v1/completions", R"({"prompt": "x"})"), srv->port());
  EXPECT_TRUE(refused.starts_with("HTTP/1.1 503")) << refused;
  // /metrics still answers, so that the last scrape sees the final counts.
  const std::string metrics = get("/metrics", srv->port());
  EXPECT_TRUE(metrics.starts_with("HTTP/1.1 200")) << metrics;
  EXPECT_NE(metrics.find("sluice_num_requests_running"), std::string::npos) << metrics;
  srv->request_immediate_shutdown();
  drain.join();  // well before drain_seconds
  const std::string r = running.read_all();
  EXPECT_TRUE(r.starts_with("HTTP/1.1 503")) << r;
  EXPECT_EQ(engine_->metrics().num_requests_finished[static_cast<int>(FinishReason::kCancelled)], 1);
  // The engine has shut down: the fixture's TearDown still finds every block free.
}

// A stream of n choices cut short by the shutdown carries one error event, not n alike ones
// (n = 2: the fixture queues 2 at most).
TEST_F(ServerTest, AStreamCutShortByShutdownCarriesOneErrorEvent) {
  ServerConfig sc;
  sc.drain_seconds = 60;
  auto srv = make_server(sc);
  Connection running(srv->port());
  running.send(post("/v1/completions",
                    R"({"prompt": "x", "max_tokens": 1900, "ignore_eos": true, "n": 2, "stream": true})"));
  for (int i = 0; i < 2000 && engine_->metrics().num_running < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(engine_->metrics().num_running, 2) << running.read_all().substr(0, 400);
  srv->request_shutdown();
  std::thread drain([&] { srv->run_until_shutdown(); });
  for (int i = 0; i < 200 && !get("/health", srv->port()).starts_with("HTTP/1.1 503"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  srv->request_immediate_shutdown();
  drain.join();
  const std::string r = running.read_all();
  EXPECT_TRUE(r.starts_with("HTTP/1.1 200")) << r.substr(0, 400);
  int errors = 0;
  for (size_t at = r.find("data: {\"error\""); at != std::string::npos; at = r.find("data: {\"error\"", at + 1)) ++errors;
  EXPECT_EQ(errors, 1) << r.substr(r.size() > 2000 ? r.size() - 2000 : 0);
}

TEST_F(ServerTest, HostNamesResolveAndBadHostsAreClearErrors) {
  ServerConfig sc;
  sc.host = "localhost";
  sc.port = 0;
  auto named = HttpServer::create(*api_, sc);
  ASSERT_TRUE(named) << named.error().message();
  EXPECT_GT((*named)->port(), 0);
  sc.host = "127.0.0.1";
  sc.port = server_->port();  // taken by the fixture's server
  auto taken = HttpServer::create(*api_, sc);
  ASSERT_FALSE(taken);
  EXPECT_NE(taken.error().message().find(fmt::format("cannot listen on 127.0.0.1:{}", server_->port())),
            std::string::npos)
      << taken.error().message();
}

}  // namespace
}  // namespace sluice::server
