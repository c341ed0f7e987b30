// The in-process server fixture of the server tests (server_test.cc, openai_api_test.cc,
// generation_test.cc): the
// demo model behind an engine with small limits and a real HttpServer on an ephemeral port, a
// raw-socket Connection, and request helpers.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <string_view>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "model/loader.h"
#include "server/http_server.h"

namespace sluice::server::server_testing {

class Connection {
 public:
  // rcvbuf > 0: a small receive buffer, set before connecting (a client that reads slowly).
  explicit Connection(uint16_t port, int rcvbuf = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    timeval tv{.tv_sec = 60, .tv_usec = 0};  // generous: sanitizer builds on a loaded machine are ~50x slower
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
  // Everything until the server closes (or the receive timeout passes with no byte).
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

inline std::string post(std::string_view path, std::string_view body, bool keep_alive = false) {
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

inline std::string body_of(const std::string& response) {
  const size_t p = response.find("\r\n\r\n");
  return p == std::string::npos ? std::string() : response.substr(p + 4);
}


}  // namespace sluice::server::server_testing
