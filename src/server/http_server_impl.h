// What the HTTP server's files share (http_server.cc: listening, starting, draining;
// http_session.h: one connection). Not part of the server's interface.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>

#include "common/mutex.h"
#include "server/http_server.h"

namespace sluice::server {

namespace net = boost::asio;
namespace beast = boost::beast;
using tcp = net::ip::tcp;

class Session;  // http_session.h

struct HttpServer::Impl {
  Impl(OpenAiApi& a, ServerConfig c) : api(a), config(std::move(c)) {}

  OpenAiApi& api;
  const ServerConfig config;
  net::io_context ioc;
  // The acceptor and the signal set are touched only on this strand (accepting, and closing
  // them at the end of a drain, run on different I/O threads otherwise).
  net::strand<net::io_context::executor_type> control{net::make_strand(ioc)};
  tcp::acceptor acceptor{control};
  net::signal_set signals{control, SIGINT, SIGTERM};
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;

  // Request work (JSON, chat template, tokenizer) runs here, never on the I/O threads.
  net::thread_pool workers{static_cast<size_t>(std::max(1, config.threads))};

  std::atomic<bool> draining{false};
  std::atomic<bool> drain_now{false};   // a second signal: stop waiting for in-flight requests
  std::atomic<int64_t> in_flight{0};
  std::atomic<int64_t> buffered_bytes{0};

  Mutex mu;
  CondVar cv;
  bool shutdown_requested SLUICE_GUARDED_BY(mu) = false;
  std::vector<std::weak_ptr<Session>> sessions SLUICE_GUARDED_BY(mu);  // pruned as they close
  HttpMetrics metrics SLUICE_GUARDED_BY(mu);

  void count_response(const std::string& route, int status) {
    MutexLock lock(mu);
    ++metrics.responses[{route, status}];
  }
  void count_disconnect() {
    MutexLock lock(mu);
    ++metrics.client_disconnects;
  }
  void count_slow_client() {
    MutexLock lock(mu);
    ++metrics.slow_client_cancels;
  }
  void count_write_timeout() {
    MutexLock lock(mu);
    ++metrics.write_timeouts;
  }
  void count_timeout() {
    MutexLock lock(mu);
    ++metrics.request_timeouts;
  }
  bool origin_allowed(std::string_view origin) const {
    if (origin.empty()) return false;
    for (const std::string& o : config.allowed_origins) {
      if (o == "*" || o == origin) return true;
    }
    return false;
  }
  void accept();
};

// A connection's session (http_session.cc), and starting it: once started it keeps itself
// alive while it has work; the server keeps a weak reference for the drain.
std::shared_ptr<Session> make_session(tcp::socket socket, HttpServer::Impl& server);
void start_session(const std::shared_ptr<Session>& session);
// Drain: closes the connection if it waits for its next request; one serving a request closes
// after the response.
void close_session_if_idle(const std::shared_ptr<Session>& session);

}  // namespace sluice::server
