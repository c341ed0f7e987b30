// The HTTP server in-process, over raw sockets: hostile bytes, overload, disconnects,
// pipelining. (Real clients are exercised in tests/clients.)
#include <atomic>
#include <chrono>
#include <random>
#include <set>
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

}  // namespace
}  // namespace sluice::server

namespace sluice::server {
namespace {

// A JSON number outside a double's range, in a known or an unknown field, was an uncaught
// nlohmann::json::out_of_range that ended the process.
TEST_F(ServerTest, NumbersOutOfRangeAre400s) {
  for (const char* body : {R"({"prompt": "x", "max_tokens": 1e400})", R"({"prompt": "x", "whatever": -1e400})",
                           R"({"messages": [{"role": "user", "content": "x"}], "n": 1)" "0000000000000000000000000000000"
                           "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
                           "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
                           "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000e9}"}) {
    const std::string route = std::string_view(body).find("messages") != std::string_view::npos ? "/v1/chat/completions"
                                                                                                 : "/v1/completions";
    const std::string r = exchange(post(route, body));
    EXPECT_TRUE(r.starts_with("HTTP/1.1 400")) << r;
    EXPECT_NE(r.find("number overflow"), std::string::npos) << r;
  }
  expect_healthy();
}

TEST_F(ServerTest, PromptThatCannotFitIsRefusedBeforeTokenizing) {
  ServerConfig sc;
  sc.max_body_bytes = 16 << 20;
  auto big = make_server(sc);
  const int64_t limit = engine_->max_sequence_tokens();
  const int64_t bytes = limit * loaded_.tokenizer->max_bytes_per_token() + 1;
  const std::string r = exchange(post("/v1/completions", R"({"prompt": ")" + std::string(bytes, 'a') + R"("})"),
                                 big->port());
  EXPECT_TRUE(r.starts_with("HTTP/1.1 400")) << r.substr(0, 300);
  EXPECT_NE(r.find(fmt::format("the prompt has {} bytes, more than {} tokens can hold", bytes, limit)),
            std::string::npos)
      << body_of(r);
  EXPECT_NE(r.find(R"("param":"prompt")"), std::string::npos);
  // One byte less still tokenizes (and is refused with its token count).
  const std::string r2 = exchange(post("/v1/completions", R"({"prompt": ")" + std::string(bytes - 1, 'a') + R"("})"),
                                  big->port());
  EXPECT_NE(r2.find("but the prompt has"), std::string::npos) << body_of(r2);
  EXPECT_EQ(r2.find("bytes, more than"), std::string::npos) << body_of(r2);
  big->request_shutdown();
  big->run_until_shutdown();
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

TEST_F(ServerTest, MoreChoicesThanTheQueueHoldsIsA400) {
  // max_queued_requests is 2: n = 3 can never be admitted; a retry would not help.
  const std::string r = exchange(post("/v1/completions", R"({"prompt": "x", "n": 3, "max_tokens": 1})"));
  EXPECT_TRUE(r.starts_with("HTTP/1.1 400")) << r;
  EXPECT_NE(r.find("more than the server queues at once (--max-queued-requests 2)"), std::string::npos) << r;
  EXPECT_NE(r.find(R"("param":"n")"), std::string::npos) << r;
}

TEST_F(ServerTest, TokenizeCountsWhatTheChatRequestCounts) {
  // A template that renders the tools, over the same engine.
  auto tmpl = chat::ChatTemplate::parse(
      "{% if tools %}{{ tools | tojson }}{% endif %}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
      "{% if add_generation_prompt %}<assistant>{% endif %}");
  ASSERT_TRUE(tmpl) << tmpl.error().message();
  OpenAiApi api(*engine_, *loaded_.tokenizer, std::move(*tmpl), ApiConfig{.model_name = "m"});
  ServerConfig sc;
  sc.port = 0;
  auto srv = HttpServer::create(api, sc);
  ASSERT_TRUE(srv);
  (*srv)->start();
  const uint16_t port = (*srv)->port();
  const std::string messages = R"("messages": [{"role": "user", "content": "what is the weather?"}])";
  const std::string tools =
      R"("tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}])";
  const Json t = Json::parse(body_of(exchange(post("/tokenize", "{" + messages + ", " + tools + "}"), port)));
  const Json plain = Json::parse(body_of(exchange(post("/tokenize", "{" + messages + "}"), port)));
  const Json chat = Json::parse(body_of(
      exchange(post("/v1/chat/completions", "{" + messages + ", " + tools + R"(, "max_tokens": 1})"), port)));
  EXPECT_EQ(t["count"], chat["usage"]["prompt_tokens"]) << t << "\n" << chat;
  EXPECT_GT(t["count"].get<int>(), plain["count"].get<int>() + 10);
  // tool_choice "none" leaves the tools out of the prompt, in both.
  const Json none = Json::parse(
      body_of(exchange(post("/tokenize", "{" + messages + ", " + tools + R"(, "tool_choice": "none"})"), port)));
  EXPECT_EQ(none["count"], plain["count"]);
  const Json chat_none = Json::parse(body_of(exchange(
      post("/v1/chat/completions", "{" + messages + ", " + tools + R"(, "tool_choice": "none", "max_tokens": 1})"), port)));
  EXPECT_EQ(chat_none["usage"]["prompt_tokens"], plain["count"]);
  (*srv)->request_shutdown();
  (*srv)->run_until_shutdown();
}

// One `created` for every chunk of a response, read once when it starts: with a clock that moves
// a second at each reading, a streamed answer's chunks (the usage chunk too) still agree.
TEST_F(ServerTest, EveryChunkOfAResponseHasItsOneCreated) {
  auto tmpl = chat::ChatTemplate::parse(chat::default_chatml_template());
  ASSERT_TRUE(tmpl);
  std::atomic<int64_t> seconds{1'700'000'000};
  ApiConfig config{.model_name = "m"};
  config.now = [&] { return std::chrono::system_clock::time_point(std::chrono::seconds(seconds++)); };
  OpenAiApi api(*engine_, *loaded_.tokenizer, std::move(*tmpl), config);
  ServerConfig sc;
  sc.port = 0;
  auto srv = HttpServer::create(api, sc);
  ASSERT_TRUE(srv);
  (*srv)->start();
  for (const char* body : {R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stream": true,
                               "ignore_eos": true, "stream_options": {"include_usage": true}})",
                           R"({"prompt": "hi", "max_tokens": 8, "n": 2, "stream": true, "ignore_eos": true})"}) {
    const bool chat = std::string_view(body).find("messages") != std::string_view::npos;
    const std::string sse = body_of(exchange(post(chat ? "/v1/chat/completions" : "/v1/completions", body),
                                             (*srv)->port()));
    std::set<int64_t> created;
    int chunks = 0;
    for (size_t at = sse.find("data: {"); at != std::string::npos; at = sse.find("data: {", at + 1)) {
      const Json chunk = Json::parse(sse.substr(at + 6, sse.find('\n', at) - at - 6));
      created.insert(chunk["created"].get<int64_t>());
      ++chunks;
    }
    EXPECT_GE(chunks, 2) << sse;  // tokens since the last read share a chunk: how many varies
    EXPECT_EQ(created.size(), 1u) << sse;
  }
  EXPECT_GT(seconds.load(), 1'700'000'001);  // the clock was read: this test could tell
  (*srv)->request_shutdown();
  (*srv)->run_until_shutdown();
}

TEST_F(ServerTest, PromptTokenOutsideTheVocabularyNamesThePrompt) {
  const std::string r = exchange(post("/v1/completions", R"({"prompt": [1, 999999], "max_tokens": 1})"));
  EXPECT_TRUE(r.starts_with("HTTP/1.1 400")) << r;
  EXPECT_NE(r.find("'prompt' token 999999 (at index 1) is outside the vocabulary"), std::string::npos) << r;
  EXPECT_NE(r.find(R"("param":"prompt")"), std::string::npos) << r;
}

// The fixture's template (ChatML) renders neither tools nor tool calls: a request with them is
// refused rather than answered as if they were not there; tool_choice "none" leaves tools out.
TEST_F(ServerTest, ToolsATemplateCannotRenderAreRefused) {
  const std::string tools =
      R"("tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}])";
  const std::string messages = R"("messages": [{"role": "user", "content": "weather?"}])";
  for (const std::string path : {"/v1/chat/completions", "/tokenize"}) {
    const std::string extra = path == "/tokenize" ? "" : R"(, "max_tokens": 1)";
    const std::string r = exchange(post(path, "{" + messages + ", " + tools + extra + "}"));
    EXPECT_TRUE(r.starts_with("HTTP/1.1 400")) << path << ": " << r;
    EXPECT_NE(r.find("does not render tools"), std::string::npos) << r;
    EXPECT_NE(r.find(R"("param":"tools")"), std::string::npos) << r;
  }
  const std::string none = exchange(post("/v1/chat/completions",
      "{" + messages + ", " + tools + R"(, "tool_choice": "none", "max_tokens": 1})"));
  EXPECT_TRUE(none.starts_with("HTTP/1.1 200")) << none;
  const std::string call = exchange(post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "w?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
       "function": {"name": "get_weather", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "sunny"}], "max_tokens": 1})"));
  EXPECT_TRUE(call.starts_with("HTTP/1.1 400")) << call;
  EXPECT_NE(call.find("'messages[1].tool_calls': this model's chat template does not render tool calls"),
            std::string::npos) << call;
  wait_engine_idle();
}

// A role or message field the template never renders would leave the prompt without a word:
// each is refused, found by rendering without it. "developer" is "system" where the template
// does not know it.
TEST_F(ServerTest, MessagesTheTemplateWouldDropAreRefused) {
  auto api_with = [&](std::string_view source) {
    auto tmpl = chat::ChatTemplate::parse(source);
    EXPECT_TRUE(tmpl) << tmpl.error().message();
    return std::make_unique<OpenAiApi>(*engine_, *loaded_.tokenizer, std::move(*tmpl), ApiConfig{.model_name = "m"});
  };
  auto outcome = [](const OpenAiApi& api, std::string_view messages) {
    auto r = api.tokenize(Json::parse(fmt::format(R"({{"messages": {}}})", messages)));
    return r ? (*r)["tokens"].dump() : r.error().message;
  };
  // Phi-3's way: a branch per known role, nothing for the others.
  const auto known_roles = api_with(
      "{% for m in messages %}{% if m.role == 'user' %}<u>{{ m.content }}{% elif m.role == 'assistant' %}<a>{{ m.content }}"
      "{% elif m.role == 'system' %}<s>{{ m.content }}{% endif %}{% endfor %}");
  const std::string system = outcome(*known_roles, R"([{"role": "system", "content": "be brief"}, {"role": "user", "content": "x"}])");
  ASSERT_TRUE(system.starts_with("[")) << system;
  EXPECT_EQ(outcome(*known_roles, R"([{"role": "developer", "content": "be brief"}, {"role": "user", "content": "x"}])"), system);
  EXPECT_EQ(outcome(*known_roles, R"([{"role": "user", "content": "x"}, {"role": "tool", "content": "sunny"}])"),
            "'messages[1]': this model's chat template does not render messages with role 'tool', so the model would "
            "never see them");
  EXPECT_EQ(outcome(*known_roles, R"([{"role": "user", "content": "x", "name": "alice"}])"),
            "'messages[0].name': this model's chat template does not render a message's 'name', so the model would "
            "never see it");
  EXPECT_EQ(outcome(*known_roles, R"([{"role": "user", "content": "x"}, {"role": "user", "content": "y", "foo": 1}])"),
            "'messages[1].foo': this model's chat template does not render a message's 'foo', so the model would never "
            "see it");
  // An empty system message says nothing, dropped or not; ids are never required to show.
  EXPECT_TRUE(outcome(*known_roles, R"([{"role": "tool", "content": ""}, {"role": "user", "content": "x"}])").starts_with("["));
  // A template that renders names and any role takes them.
  const auto generic = api_with(
      "{% for m in messages %}{{ m.role }}{% if m.name %}({{ m.name }}){% endif %}: {{ m.content }}\n{% endfor %}");
  EXPECT_TRUE(outcome(*generic, R"([{"role": "ipython", "content": "42"}, {"role": "user", "content": "x", "name": "alice"}])")
                  .starts_with("["));
  // One that knows "developer" gets it as sent.
  const auto developer = api_with(
      "{% for m in messages %}{% if m.role == 'developer' %}<d>{% endif %}{{ m.content }}{% endfor %}");
  EXPECT_NE(outcome(*developer, R"([{"role": "developer", "content": "x"}])"),
            outcome(*developer, R"([{"role": "system", "content": "x"}])"));
  // Qwen's way: a default system prompt when none is sent, so a system message repeating it
  // renders the same prompt as none. The template names the role: it is rendered, not refused.
  const auto with_default = api_with(
      "{% if messages[0].role == 'system' %}{{ messages[0].content }}{% set rest = messages[1:] %}"
      "{% else %}Be helpful.{% set rest = messages %}{% endif %}{% for m in rest %}<{{ m.role }}>{{ m.content }}{% endfor %}");
  EXPECT_EQ(outcome(*with_default, R"([{"role": "system", "content": "Be helpful."}, {"role": "user", "content": "x"}])"),
            outcome(*with_default, R"([{"role": "user", "content": "x"}])"));
  // Each unnamed role or field costs a render: past 8 of either, the request is refused.
  std::string roles = "[";
  for (int i = 0; i < 9; ++i) roles += fmt::format(R"({{"role": "r{}", "content": "x"}}, )", i);
  EXPECT_EQ(outcome(*generic, roles + R"({"role": "user", "content": "x"}])"),
            "the messages hold more than 8 roles that this model's chat template does not name");
  std::string fields = R"([{"role": "user", "content": "x")";
  for (int i = 0; i < 9; ++i) fields += fmt::format(R"(, "f{}": 1)", i);
  EXPECT_EQ(outcome(*generic, fields + "}]"),
            "the messages hold more than 8 fields that this model's chat template does not name");
}

TEST_F(ServerTest, OpenAiShapes) {
  const Json chat = Json::parse(body_of(exchange(post(
      "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})"))));
  EXPECT_TRUE(chat["choices"][0]["message"].contains("refusal"));
  EXPECT_TRUE(chat["choices"][0]["message"]["refusal"].is_null());
  EXPECT_EQ(chat["usage"]["completion_tokens_details"]["reasoning_tokens"], 0);

  const std::string unknown = exchange(post("/v1/completions", R"({"model": "nope", "prompt": "x"})"));
  EXPECT_TRUE(unknown.starts_with("HTTP/1.1 404")) << unknown;
  const Json e = Json::parse(body_of(unknown));
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["code"], "model_not_found");
  EXPECT_EQ(e["error"]["param"], "model");

  const std::string model = get("/v1/models/m");
  EXPECT_TRUE(model.starts_with("HTTP/1.1 200")) << model;
  EXPECT_EQ(Json::parse(body_of(model))["id"], "m");
  const std::string missing = get("/v1/models/other%2Fmodel");
  EXPECT_TRUE(missing.starts_with("HTTP/1.1 404")) << missing;
  EXPECT_NE(missing.find("The model 'other/model' does not exist"), std::string::npos) << missing;

  const std::string head = exchange("HEAD /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(head.starts_with("HTTP/1.1 200")) << head;
  EXPECT_NE(head.find("Content-Length: 15\r\n"), std::string::npos) << head;
  EXPECT_EQ(body_of(head), "");
  // A HEAD answer never has a body, errors included (the client would take it for the next response).
  const std::string head405 = exchange("HEAD /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(head405.starts_with("HTTP/1.1 405")) << head405;
  EXPECT_EQ(body_of(head405), "");
  const std::string head404 = exchange("HEAD /nowhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(head404.starts_with("HTTP/1.1 404")) << head404;
  EXPECT_EQ(body_of(head404), "");
}

TEST_F(ServerTest, ApiKeyErrorsAreOpenAiShaped) {
  ServerConfig sc;
  sc.api_key = "k";
  auto srv = make_server(sc);
  const std::string r = exchange(
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\nContent-Length: 2\r\n"
      "Connection: close\r\n\r\n{}",
      srv->port());
  EXPECT_TRUE(r.starts_with("HTTP/1.1 401")) << r;
  EXPECT_NE(r.find("WWW-Authenticate: Bearer\r\n"), std::string::npos) << r;
  const Json e = Json::parse(body_of(r));
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["code"], "invalid_api_key");
  // The scheme is case-insensitive, as RFC 9110 has it.
  for (const char* auth : {"bearer k", "BEARER  k"}) {
    const std::string ok = exchange(fmt::format("GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: {}\r\n"
                                                "Connection: close\r\n\r\n", auth),
                                    srv->port());
    EXPECT_TRUE(ok.starts_with("HTTP/1.1 200")) << auth << ": " << ok;
  }
  EXPECT_TRUE(exchange("GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Basic k\r\nConnection: close\r\n\r\n",
                       srv->port()).starts_with("HTTP/1.1 401"));
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
