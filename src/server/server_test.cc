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

namespace sluice::server {
namespace {

class Connection {
 public:
  explicit Connection(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{.tv_sec = 10, .tv_usec = 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~Connection() { ::close(fd_); }
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

  void wait_engine_idle() {
    for (int i = 0; i < 500; ++i) {
      const EngineMetrics m = engine_->metrics();
      if (m.kv_blocks_used == 0 && m.num_running == 0 && m.num_waiting == 0 && server_->requests_in_flight() == 0) {
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    FAIL() << "requests still running";
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
