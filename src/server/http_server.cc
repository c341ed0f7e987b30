#include "server/http_server.h"

#include <algorithm>
#include <csignal>
#include <future>
#include <iostream>

#include <fmt/format.h>

#include "server/http_server_impl.h"

namespace sluice::server {

void HttpServer::Impl::accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
    if (ec) {
      // Out of descriptors and the like: say so, wait a little, keep serving.
      std::cerr << "sluice serve: accept failed: " << ec.message() << "\n";
      auto timer = std::make_shared<net::steady_timer>(control, std::chrono::milliseconds(100));
      timer->async_wait([this, timer](beast::error_code) { accept(); });
      return;
    }
    // Streamed tokens are small writes: without TCP_NODELAY, Nagle's algorithm holds each one
    // back until the client's (delayed, ~40 ms) ACK of the previous.
    beast::error_code opt_ec;
    socket.set_option(tcp::no_delay(true), opt_ec);
    if (config.send_buffer_bytes > 0) {
      socket.set_option(net::socket_base::send_buffer_size(config.send_buffer_bytes), opt_ec);
    }
    auto session = make_session(std::move(socket), *this);
    {
      MutexLock lock(mu);
      std::erase_if(sessions, [](const std::weak_ptr<Session>& w) { return w.expired(); });
      sessions.push_back(session);
    }
    start_session(session);
    accept();
  });
}

Result<std::unique_ptr<HttpServer>> HttpServer::create(OpenAiApi& api, ServerConfig config) {
  auto impl = std::make_unique<Impl>(api, std::move(config));
  const ServerConfig& c = impl->config;
  beast::error_code ec;
  tcp::endpoint endpoint;
  if (const auto address = net::ip::make_address(c.host, ec); !ec) {
    endpoint = tcp::endpoint(address, c.port);
  } else {
    // A name ("localhost"): its first address.
    tcp::resolver resolver(impl->ioc);
    auto results = resolver.resolve(c.host, std::to_string(c.port), tcp::resolver::passive, ec);
    if (ec || results.empty()) {
      return Error("--host '{}' is neither an IP address nor a name that resolves ({})", c.host,
                   ec ? ec.message() : "no address");
    }
    endpoint = results.begin()->endpoint();
  }
  tcp::acceptor& a = impl->acceptor;
  a.open(endpoint.protocol(), ec);
  if (!ec) a.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(endpoint, ec);
  if (!ec) a.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return Error("cannot listen on {}:{}: {}", c.host, c.port, ec.message());
  std::unique_ptr<HttpServer> server(new HttpServer(std::move(impl)));
  server->port_ = server->impl_->acceptor.local_endpoint().port();
  return server;
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() {
  if (!threads_.empty() && !stopped_) drain_and_stop();
}

void HttpServer::start() {
  impl_->work.emplace(impl_->ioc.get_executor());
  impl_->signals.async_wait([this](beast::error_code ec, int signal) {
    if (ec) return;
    std::cerr << "sluice serve: " << (signal == SIGTERM ? "SIGTERM" : "SIGINT")
              << ": shutting down (a second signal cancels what still runs)\n";
    request_shutdown();
    impl_->signals.async_wait([this](beast::error_code ec2, int signal2) {
      if (ec2) return;
      std::cerr << "sluice serve: second " << (signal2 == SIGTERM ? "SIGTERM" : "SIGINT")
                << ": cancelling " << impl_->in_flight.load() << " request(s) and exiting\n";
      request_immediate_shutdown();
    });
  });
  impl_->accept();
  const int n = std::max(1, impl_->config.threads);
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { impl_->ioc.run(); });
}

void HttpServer::request_shutdown() {
  {
    MutexLock lock(impl_->mu);
    impl_->shutdown_requested = true;
  }
  impl_->cv.notify_all();
}

void HttpServer::request_immediate_shutdown() {
  impl_->drain_now = true;
  request_shutdown();
}

void HttpServer::run_until_shutdown() {
  {
    MutexLock lock(impl_->mu);
    while (!impl_->shutdown_requested) impl_->cv.wait(lock);
  }
  drain_and_stop();
}

HttpMetrics HttpServer::http_metrics() const {
  MutexLock lock(impl_->mu);
  return impl_->metrics;
}

int64_t HttpServer::requests_in_flight() const { return impl_->in_flight.load(); }

void HttpServer::drain_and_stop() {
  if (stopped_) return;
  stopped_ = true;
  Impl& s = *impl_;
  s.draining = true;
  // The listener stays open: new requests, /health among them, are answered 503.
  net::post(s.ioc, [&s] {
    std::vector<std::shared_ptr<Session>> live;
    {
      MutexLock lock(s.mu);
      for (auto& w : s.sessions) {
        if (auto p = w.lock()) live.push_back(std::move(p));
      }
    }
    for (auto& p : live) close_session_if_idle(p);
  });
  using clock = std::chrono::steady_clock;
  auto wait_until_idle = [&](clock::time_point deadline) {
    while (s.in_flight > 0 && clock::now() < deadline && !s.drain_now) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  wait_until_idle(clock::now() + std::chrono::milliseconds(static_cast<int64_t>(s.config.drain_seconds * 1000)));
  if (s.in_flight > 0 && !s.drain_now) {
    std::cerr << "sluice serve: " << s.in_flight.load() << " request(s) still running after "
              << s.config.drain_seconds << " s; cancelling them\n";
  }
  // Ends whatever is left (clients get an error event or a 503) and stops the engine thread,
  // so no engine callback can reach the event loop after it stops.
  s.api.engine().shutdown();
  s.drain_now = false;  // the cancelled requests' last bytes may still go out (briefly)
  wait_until_idle(clock::now() + std::chrono::seconds(2));
  std::promise<void> closed;
  net::post(s.control, [&s, &closed] {
    beast::error_code ec;
    s.acceptor.close(ec);
    s.signals.cancel(ec);
    closed.set_value();
  });
  closed.get_future().wait();
  s.workers.stop();
  s.workers.join();
  s.work.reset();
  s.ioc.stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

}  // namespace sluice::server
