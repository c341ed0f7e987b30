// The HTTP server in-process, over raw sockets: hostile bytes, overload, disconnects,
// pipelining. (Real clients are exercised in tests/clients.)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "model/loader.h"
#include "server/http_server.h"

#include <fmt/format.h>

namespace sluice::server {
namespace {

class Connection {
 public:
  // rcvbuf > 0: a small receive buffer, set before connecting (a client that reads slowly).
  explicit Connection(uint16_t port, int rcvbuf = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    timeval tv{.tv_sec = 10, .tv_usec = 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~Connection() { ::close(fd_); }
  void half_close() { ::shutdown(fd_, SHUT_WR); }
  bool connected() const { return connected_; }
  void send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
  }
  void set_timeout(int ms) {
    timeval tv{.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  // Everything until the server closes (or 10 s pass).
  std::string read_all() {
    std::string out;
    char buf[4096];
    for (;;) {
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return out;
      out.append(buf, static_cast<size_t>(n));
    }
  }
  // Reads until `marker` has been seen `count` times.
  std::string read_until(std::string_view marker, int count = 1) {
    std::string out;
    char buf[4096];
    auto seen = [&] {
      int c = 0;
      for (size_t p = out.find(marker); p != std::string::npos; p = out.find(marker, p + 1)) ++c;
      return c;
    };
    while (seen() < count) {
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

std::string post(std::string_view path, std::string_view body, bool keep_alive = false) {
  return fmt::format("POST {} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{}\r\n{}",
                     path, body.size(), keep_alive ? "" : "Connection: close\r\n", body);
}

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto loaded = load_model("demo");
    ASSERT_TRUE(loaded) << loaded.error().message();
    loaded_ = std::move(*loaded);
    EngineConfig ec;
    ec.max_num_seqs = 2;
    ec.max_batch_tokens = 64;
    ec.max_queued_requests = 2;
    ec.kv_cache_bytes = 8 << 20;
    auto engine = Engine::create(*loaded_.model, *loaded_.tokenizer, pool_, ec);
    ASSERT_TRUE(engine) << engine.error().message();
    engine_ = std::move(*engine);
    auto tmpl = chat::ChatTemplate::parse(chat::default_chatml_template());
    ASSERT_TRUE(tmpl);
    api_ = std::make_unique<OpenAiApi>(*engine_, *loaded_.tokenizer, std::move(*tmpl), ApiConfig{.model_name = "m"});
    ServerConfig sc;
    sc.port = 0;
    sc.idle_timeout_seconds = 0.5;
    sc.max_body_bytes = 4096;
    sc.drain_seconds = 5;
    auto server = HttpServer::create(*api_, sc);
    ASSERT_TRUE(server) << server.error().message();
    server_ = std::move(*server);
    server_->start();
  }

  void TearDown() override {
    if (!server_) return;
    server_->request_shutdown();
    server_->run_until_shutdown();
    // Nothing held: every request ended and freed its blocks.
    const EngineMetrics m = engine_->metrics();
    EXPECT_EQ(m.kv_blocks_used, 0);
    EXPECT_EQ(m.kv_blocks_free + m.kv_blocks_cached, m.kv_blocks_total);
  }

  void expect_healthy() {
    Connection c(server_->port());
    ASSERT_TRUE(c.connected());
    c.send("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    const std::string r = c.read_all();
    EXPECT_TRUE(r.starts_with("HTTP/1.1 200 OK")) << r;
    EXPECT_NE(r.find(R"({"status":"ok"})"), std::string::npos);
  }

  // The engine's own signal that nothing is queued or running (never a guess by sleeping),
  // then every block must be free.
  void wait_engine_idle() {
    const EngineMetrics m = engine_->wait_until_idle();
    EXPECT_EQ(m.kv_blocks_used, 0);
    EXPECT_EQ(m.num_running + m.num_waiting, 0);
  }

  // A second server over the same engine, with other limits.
  std::unique_ptr<HttpServer> make_server(ServerConfig sc) {
    sc.port = 0;
    auto server = HttpServer::create(*api_, sc);
    EXPECT_TRUE(server) << server.error().message();
    (*server)->start();
    return std::move(*server);
  }

  std::string get(std::string_view path, uint16_t port = 0, std::string_view extra = {}) {
    Connection c(port ? port : server_->port());
    c.send(fmt::format("GET {} HTTP/1.1\r\nHost: x\r\n{}Connection: close\r\n\r\n", path, extra));
    return c.read_all();
  }
  std::string exchange(std::string_view bytes, uint16_t port = 0) {
    Connection c(port ? port : server_->port());
    c.send(bytes);
    return c.read_all();
  }

  ThreadPool pool_{1};
  LoadedModel loaded_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<OpenAiApi> api_;
  std::unique_ptr<HttpServer> server_;
};

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
  conns.clear();  // the others hang up: their requests are cancelled
  wait_engine_idle();
  EXPECT_GE(server_->http_metrics().client_disconnects, 1);
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

std::string body_of(const std::string& response) {
  const size_t p = response.find("\r\n\r\n");
  return p == std::string::npos ? std::string() : response.substr(p + 4);
}

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
  const Json e = Json::parse(body_of(r));
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["code"], "invalid_api_key");
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
  srv->request_shutdown();
  srv->run_until_shutdown();
  // Without --allowed-origins no origin is allowed.
  EXPECT_EQ(get("/health", 0, "Origin: http://app.example\r\n").find("Access-Control-Allow-Origin"), std::string::npos);
}

// While draining, the listener stays open and /health says 503, so a load balancer stops
// sending; a second signal ends the drain at once, cancelling what still runs.
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

namespace sluice::server {
namespace {

// Predicted outputs over HTTP: the same answer, streamed or not, with the prediction's use in
// usage and /metrics.
TEST_F(ServerTest, PredictedOutputsChangeNothingButTheUsage) {
  const std::string base = R"({"prompt": "the cat", "max_tokens": 24, "temperature": 0, "ignore_eos": true)";
  const Json plain = Json::parse(body_of(exchange(post("/v1/completions", base + "}"))));
  const std::string text = plain["choices"][0]["text"];
  EXPECT_EQ(plain["usage"]["completion_tokens_details"]["accepted_prediction_tokens"], 0);
  const std::string prediction = R"(, "prediction": {"type": "content", "content": )" + Json(text).dump() + "}";
  const Json predicted = Json::parse(body_of(exchange(post("/v1/completions", base + prediction + "}"))));
  EXPECT_EQ(predicted["choices"][0]["text"], text);
  const Json& details = predicted["usage"]["completion_tokens_details"];
  EXPECT_GT(details["accepted_prediction_tokens"].get<int>(), 0) << predicted.dump();
  const Json off = Json::parse(body_of(exchange(post("/v1/completions", base + prediction + R"(, "speculative": false})"))));
  EXPECT_EQ(off["choices"][0]["text"], text);
  EXPECT_EQ(off["usage"]["completion_tokens_details"]["accepted_prediction_tokens"], 0);
  // Streamed: the deltas make up the same text.
  const std::string sse = body_of(exchange(post("/v1/completions", base + prediction + R"(, "stream": true})")));
  std::string streamed;
  for (size_t at = sse.find("data: {"); at != std::string::npos; at = sse.find("data: {", at + 1)) {
    const size_t end = sse.find("\n\n", at);
    streamed += Json::parse(sse.substr(at + 6, end - at - 6))["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(streamed, text);
  const std::string metrics = get("/metrics");
  EXPECT_NE(metrics.find(R"(sluice_spec_decode_num_accepted_tokens_total{model_name="m",proposer="prediction"} )"),
            std::string::npos) << metrics;
  EXPECT_NE(metrics.find(R"(sluice_spec_decode_num_accepted_tokens_per_pos_total{model_name="m",proposer="prediction",position="0"} )"),
            std::string::npos);
  wait_engine_idle();
}

}  // namespace
}  // namespace sluice::server

namespace sluice::server {
namespace {

// echo + logprobs + max_tokens 0 (the legacy API's way to score a text, what likelihood
// evaluations send): the prompt comes back with each token's logprob, the first one null, and
// those logprobs are the ones generation reported for the same tokens.
TEST_F(ServerTest, EchoScoresThePromptAsGenerationScoredIt) {
  // Generate greedily with token ids as the logprobs' tokens...
  const Json gen = Json::parse(body_of(exchange(post("/v1/completions",
      R"({"prompt": "the cat sat", "max_tokens": 6, "temperature": 0, "ignore_eos": true, "logprobs": 2,
          "return_tokens_as_token_ids": true})"))));
  const Json& glp = gen["choices"][0]["logprobs"];
  ASSERT_EQ(glp["tokens"].size(), 6u) << gen.dump();
  std::vector<int32_t> generated;
  for (const Json& t : glp["tokens"]) {
    const std::string s = t.get<std::string>();
    ASSERT_TRUE(s.starts_with("token_id:")) << s;
    generated.push_back(std::stoi(s.substr(9)));
  }
  for (const auto& [k, v] : glp["top_logprobs"][0].items()) EXPECT_TRUE(k.starts_with("token_id:")) << k;
  // ...then score prompt + output as one prompt of token ids.
  const Json tok = Json::parse(body_of(exchange(post("/tokenize", R"({"prompt": "the cat sat"})"))));
  std::vector<int32_t> ids = tok["tokens"].get<std::vector<int32_t>>();
  const size_t num_prompt = ids.size();
  ids.insert(ids.end(), generated.begin(), generated.end());
  const Json scored = Json::parse(body_of(exchange(post("/v1/completions",
      Json{{"prompt", ids}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 2}, {"temperature", 0}}.dump()))));
  const Json& c = scored["choices"][0];
  EXPECT_EQ(c["finish_reason"], "length");
  EXPECT_EQ(scored["usage"]["completion_tokens"], 0);
  const Json& lp = c["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), ids.size()) << scored.dump();
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_EQ(lp["text_offset"][0], 0);
  for (size_t i = 1; i < ids.size(); ++i) {
    ASSERT_TRUE(lp["token_logprobs"][i].is_number()) << i;
    EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0);
    EXPECT_EQ(lp["top_logprobs"][i].size(), 2u);
    EXPECT_GE(lp["text_offset"][i].get<int64_t>(), lp["text_offset"][i - 1].get<int64_t>());
  }
  for (size_t i = 0; i < generated.size(); ++i) {
    EXPECT_EQ(lp["token_logprobs"][num_prompt + i], glp["token_logprobs"][i]) << "generated token " << i;
  }
  // The echoed text is the prompt decoded: the text generation started from, then its output.
  EXPECT_EQ(c["text"].get<std::string>(), "the cat sat" + gen["choices"][0]["text"].get<std::string>());

  // echo with generation: the prompt, then the completion, in the text and in the logprobs.
  const Json both = Json::parse(body_of(exchange(post("/v1/completions",
      R"({"prompt": "the cat sat", "max_tokens": 6, "temperature": 0, "ignore_eos": true, "logprobs": 0, "echo": true})"))));
  const Json& b = both["choices"][0];
  EXPECT_EQ(b["text"], "the cat sat" + gen["choices"][0]["text"].get<std::string>());
  ASSERT_EQ(b["logprobs"]["tokens"].size(), num_prompt + 6);
  EXPECT_EQ(b["logprobs"]["text_offset"][num_prompt], std::string("the cat sat").size());
  // Streamed: the first event carries the prompt and its logprobs.
  const std::string sse = body_of(exchange(post("/v1/completions",
      R"({"prompt": "the cat sat", "max_tokens": 2, "echo": true, "logprobs": 1, "stream": true})")));
  const size_t at = sse.find("data: {");
  ASSERT_NE(at, std::string::npos) << sse;
  const Json first = Json::parse(sse.substr(at + 6, sse.find("\n\n", at) - at - 6));
  EXPECT_EQ(first["choices"][0]["text"], "the cat sat");
  EXPECT_EQ(first["choices"][0]["logprobs"]["tokens"].size(), num_prompt);
  // Streamed echo without logprobs: the prompt first, then the completion.
  const std::string plain_sse = body_of(exchange(post("/v1/completions",
      R"({"prompt": "the cat sat", "max_tokens": 2, "echo": true, "stream": true})")));
  const size_t at2 = plain_sse.find("data: {");
  ASSERT_NE(at2, std::string::npos) << plain_sse;
  const Json first2 = Json::parse(plain_sse.substr(at2 + 6, plain_sse.find("\n\n", at2) - at2 - 6));
  EXPECT_EQ(first2["choices"][0]["text"], "the cat sat");
  EXPECT_TRUE(first2["choices"][0]["logprobs"].is_null());
  EXPECT_NE(plain_sse.find("data: [DONE]"), std::string::npos);
  // echo without logprobs needs no scoring; max_tokens 0 without echo is refused.
  const Json plain = Json::parse(body_of(exchange(post("/v1/completions", R"({"prompt": "the cat", "max_tokens": 0, "echo": true})"))));
  EXPECT_EQ(plain["choices"][0]["text"], "the cat");
  EXPECT_NE(exchange(post("/v1/completions", R"({"prompt": "the cat", "max_tokens": 0})")).find("'max_tokens' must be in [1,"),
            std::string::npos);
  wait_engine_idle();
}

}  // namespace
}  // namespace sluice::server
