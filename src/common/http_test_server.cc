#include "common/http_test_server.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "common/check.h"

namespace sluice::http::testing {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
constexpr auto kTuple = net::as_tuple(net::use_awaitable);

class SocketExchange : public TestExchange {
 public:
  explicit SocketExchange(tcp::socket& socket) : socket_(socket) {}

  net::awaitable<bool> write(std::string raw) override {
    auto [ec, n] = co_await net::async_write(socket_, net::buffer(raw), kTuple);
    co_return !ec;
  }
  net::awaitable<void> sleep(std::chrono::milliseconds duration) override {
    net::steady_timer timer(socket_.get_executor(), duration);
    co_await timer.async_wait(kTuple);
  }
  void close() override { closed_ = true; }
  bool closed() const { return closed_; }

 private:
  tcp::socket& socket_;
  bool closed_ = false;
};

}  // namespace

std::string_view ReceivedRequest::header(std::string_view name) const { return find_header(headers, name); }

net::awaitable<bool> TestExchange::respond(int status, std::string body, std::string content_type) {
  co_return co_await write(fmt::format("HTTP/1.1 {} X\r\nContent-Type: {}\r\nContent-Length: {}\r\n\r\n{}", status,
                                       content_type, body.size(), body));
}

net::awaitable<bool> TestExchange::begin_chunked(int status, std::string content_type) {
  co_return co_await write(
      fmt::format("HTTP/1.1 {} X\r\nContent-Type: {}\r\nTransfer-Encoding: chunked\r\n\r\n", status, content_type));
}

net::awaitable<bool> TestExchange::chunk(std::string data) {
  if (data.empty()) co_return true;  // an empty chunk would end the body
  co_return co_await write(fmt::format("{:x}\r\n{}\r\n", data.size(), data));
}

net::awaitable<bool> TestExchange::end_chunked() { co_return co_await write("0\r\n\r\n"); }

struct TestHttpServer::Impl {
  net::io_context io;
  tcp::acceptor acceptor{io};
  Handler handler;
  std::atomic<int>* num_connections = nullptr;

  net::awaitable<void> session(tcp::socket socket) {
    beast::flat_buffer buffer;
    for (;;) {
      bhttp::request<bhttp::string_body> req;
      auto [ec, n] = co_await bhttp::async_read(socket, buffer, req, kTuple);
      if (ec) break;
      ReceivedRequest r{std::string(req.method_string()), std::string(req.target()), {}, std::move(req.body())};
      for (const auto& field : req) r.headers.push_back({std::string(field.name_string()), std::string(field.value())});
      SocketExchange exchange(socket);
      co_await handler(r, exchange);
      if (exchange.closed() || !req.keep_alive()) break;
    }
    beast::error_code ignored;
    socket.shutdown(tcp::socket::shutdown_both, ignored);
    socket.close(ignored);
  }

  net::awaitable<void> accept_loop() {
    for (;;) {
      auto [ec, socket] = co_await acceptor.async_accept(kTuple);
      if (ec) co_return;
      ++*num_connections;
      // Without it, a chunk written right after another waits for the client's delayed ACK.
      beast::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      net::co_spawn(io, session(std::move(socket)), net::detached);
    }
  }
};

TestHttpServer::TestHttpServer(Handler handler) : impl_(std::make_unique<Impl>()) {
  impl_->handler = std::move(handler);
  impl_->num_connections = &num_connections_;
  tcp::endpoint endpoint(net::ip::make_address("127.0.0.1"), 0);
  impl_->acceptor.open(endpoint.protocol());
  impl_->acceptor.set_option(tcp::acceptor::reuse_address(true));
  impl_->acceptor.bind(endpoint);
  impl_->acceptor.listen();
  port_ = impl_->acceptor.local_endpoint().port();
  net::co_spawn(impl_->io, impl_->accept_loop(), net::detached);
  thread_ = std::thread([this] { impl_->io.run(); });
}

TestHttpServer::~TestHttpServer() {
  impl_->io.stop();
  thread_.join();
}

}  // namespace sluice::http::testing
