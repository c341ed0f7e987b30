#include "router/resolve.h"

#include <memory>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace sluice::router {

namespace net = boost::asio;
using tcp = net::ip::tcp;

net::awaitable<Result<std::vector<tcp::endpoint>>> resolve(std::string host, uint16_t port,
                                                           std::chrono::milliseconds limit) {
  boost::system::error_code ec;
  const auto address = net::ip::make_address(host, ec);
  if (!ec) co_return std::vector<tcp::endpoint>{tcp::endpoint(address, port)};
  auto ex = co_await net::this_coro::executor;
  // Shared with the lookup's handler, which may run long after this coroutine returned.
  struct Lookup {
    explicit Lookup(net::any_io_executor e) : resolver(e), timer(e) {}
    tcp::resolver resolver;
    net::steady_timer timer;
    bool done = false;     // the caller has its answer: a later reply is dropped
    bool replied = false;  // the lookup answered in time
    boost::system::error_code ec;
    std::vector<tcp::endpoint> endpoints;
  };
  auto lookup = std::make_shared<Lookup>(ex);
  lookup->timer.expires_after(limit);
  lookup->resolver.async_resolve(
      host, std::to_string(port),
      net::bind_executor(ex, [lookup](const boost::system::error_code& e, const tcp::resolver::results_type& results) {
        if (lookup->done) return;  // too late: the caller was told it timed out
        lookup->replied = true;
        lookup->ec = e;
        for (const auto& r : results) lookup->endpoints.push_back(r.endpoint());
        // Wakes the wait below, whether it is pending already or not yet begun.
        lookup->timer.expires_at(net::steady_timer::time_point::min());
      }));
  while (!lookup->replied && net::steady_timer::clock_type::now() < lookup->timer.expiry()) {
    co_await lookup->timer.async_wait(net::as_tuple(net::use_awaitable));
  }
  lookup->done = true;
  if (!lookup->replied) {
    // Still queued on Asio's one resolver thread (behind a lookup that hangs): dropped, so the
    // queue does not grow with every attempt. Already running: it cannot be stopped.
    lookup->resolver.cancel();
    co_return Error(StatusCode::kUnavailable, "resolving '{}' took longer than {} ms", host, limit.count());
  }
  if (lookup->ec) co_return Error(StatusCode::kUnavailable, "cannot resolve '{}': {}", host, lookup->ec.message());
  if (lookup->endpoints.empty()) co_return Error(StatusCode::kUnavailable, "'{}' resolves to no address", host);
  co_return std::move(lookup->endpoints);
}

}  // namespace sluice::router
