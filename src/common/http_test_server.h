// TestHttpServer: a real HTTP/1.1 server on 127.0.0.1 and an ephemeral port, for tests of HTTP
// clients. It runs an io_context on a thread of its own; a handler coroutine answers each
// request and may write raw bytes, pause between them or drop the connection, so a test can
// script exactly what a client sees: chunked streams split anywhere, slow tokens, a connection
// closed mid-response, statuses such as 429.
//
// Thread-safety: the handler runs on the server's thread; whatever it shares with the test
// needs its own synchronisation (or only be read after the server is destroyed).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "common/http_client.h"

namespace sluice::http::testing {

struct ReceivedRequest {
  std::string method;
  std::string target;
  std::vector<Header> headers;
  std::string body;
  std::string_view header(std::string_view name) const;
};

// What a handler answers with. Writes return false when the client has gone.
class TestExchange {
 public:
  virtual ~TestExchange() = default;
  virtual boost::asio::awaitable<bool> write(std::string raw) = 0;
  virtual boost::asio::awaitable<void> sleep(std::chrono::milliseconds duration) = 0;
  // Closes the connection once the handler returns, instead of reading the next request.
  virtual void close() = 0;

  // A whole response with Content-Length.
  boost::asio::awaitable<bool> respond(int status, std::string body, std::string content_type = "application/json");
  // A chunked response: the head, then one chunk per call, then the last chunk.
  boost::asio::awaitable<bool> begin_chunked(int status, std::string content_type);
  boost::asio::awaitable<bool> chunk(std::string data);
  boost::asio::awaitable<bool> end_chunked();
};

class TestHttpServer {
 public:
  using Handler = std::function<boost::asio::awaitable<void>(const ReceivedRequest&, TestExchange&)>;

  explicit TestHttpServer(Handler handler);
  ~TestHttpServer();  // stops the server and drops its connections

  uint16_t port() const { return port_; }
  Url url() const { return Url{"127.0.0.1", port_, ""}; }
  int num_connections() const { return num_connections_.load(); }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  uint16_t port_ = 0;
  std::atomic<int> num_connections_{0};
  std::thread thread_;
};

}  // namespace sluice::http::testing
