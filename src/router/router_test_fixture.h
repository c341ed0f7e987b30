// What the router's tests over scripted replicas share: a replica that names itself, a router
// on loopback over given replicas, and calls of its admin API.
#pragma once

#include "router/router.h"

#include <atomic>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/http_test_server.h"
#include "common/json.h"
#include "router/rollout.h"

namespace sluice::router::router_testing {

namespace net = boost::asio;
using http::testing::ReceivedRequest;
using http::testing::TestExchange;
using http::testing::TestHttpServer;
using namespace std::chrono_literals;

// A replica that answers every generation with its own name, streamed when asked.
inline TestHttpServer::Handler named(std::string name, std::atomic<int>* served = nullptr) {
  return [name, served](const ReceivedRequest& r, TestExchange& ex) -> net::awaitable<void> {
    if (r.target == "/health") {
      co_await ex.respond(200, R"({"status":"ok"})");
      co_return;
    }
    if (r.target == "/v1/models") {
      co_await ex.respond(200, R"({"object":"list","data":[{"id":")" + name + R"("},{"id":"shared"}]})");
      co_return;
    }
    if (served) ++*served;
    if (r.body.find("\"stream\":true") != std::string::npos) {
      co_await ex.begin_chunked(200, "text/event-stream");
      co_await ex.chunk("data: {\"choices\":[{\"text\":\"" + name + "\"}]}\n\n");
      co_await ex.chunk("data: [DONE]\n\n");
      co_await ex.end_chunked();
      co_return;
    }
    co_await ex.respond(200, R"({"replica":")" + name + R"("})");
  };
}

struct Fixture {
  explicit Fixture(std::vector<TestHttpServer*> replicas, std::string policy = "round_robin",
                   std::vector<http::Url> extra = {}, std::function<void(RouterConfig&)> tweak = {}) {
    RouterConfig c;
    c.port = 0;
    c.policy = policy;
    c.health_interval_seconds = 0.05;
    c.metrics_interval_seconds = 0;
    c.drain_seconds = 1;
    if (tweak) tweak(c);
    for (TestHttpServer* s : replicas) extra.push_back(s->url());
    for (const http::Url& u : extra) c.backends.push_back(*parse_backend(u.to_string()));
    config = c;
    auto r = Router::create(std::move(c));
    EXPECT_TRUE(r) << r.error().message();
    router = std::move(*r);
    router->start();
    url = http::Url{"127.0.0.1", router->port(), ""};
  }
  http::HttpResult<http::HttpResponse> post(std::string target, std::string body,
                                            std::vector<http::Header> headers = {}) {
    http::HttpRequest r{.method = "POST", .target = std::move(target), .headers = std::move(headers), .body = std::move(body)};
    return http::fetch(url, r);
  }
  http::HttpResult<http::HttpResponse> get(std::string target) {
    http::HttpRequest r{.target = std::move(target)};
    return http::fetch(url, r);
  }
  RouterConfig config;
  std::unique_ptr<Router> router;
  http::Url url;
};

// The router's metrics once they hold `want` (an answer is counted just after its client has
// it), or as they are after 5 s.
inline std::string metrics_with(const Fixture& f, const std::string& want) {
  std::string m;
  for (int i = 0; i < 500; ++i) {
    m = f.router->metrics_text();
    if (m.find(want) != std::string::npos) break;
    std::this_thread::sleep_for(10ms);
  }
  return m;
}

// A port nothing listens on: bound, not listening, so connections are refused, and held until
// the test binary ends, so that no other test (make test runs two at once) can take it. A
// port closed again could be handed to another test's server, which would then answer.
inline http::Url dead_url() {
  static std::mutex mu;
  static net::io_context io;
  static std::deque<net::ip::tcp::socket> held;
  std::lock_guard lock(mu);
  net::ip::tcp::socket& s = held.emplace_back(io);
  s.open(net::ip::tcp::v4());
  s.bind({net::ip::make_address("127.0.0.1"), 0});
  return http::Url{"127.0.0.1", s.local_endpoint().port(), ""};
}

inline http::HttpResult<http::HttpResponse> admin(const Fixture& f, std::string method, std::string target,
                                                  std::string body = "", std::string key = "adm") {
  http::HttpRequest r{.method = std::move(method), .target = std::move(target), .body = std::move(body)};
  if (!key.empty()) r.headers.push_back({"Authorization", "Bearer " + key});
  return http::fetch(f.url, r);
}

// A router that runs rollouts (admin key "adm", its store at `db`) over replica `v1` of version
// v1 and `v2` of version v2.
inline std::function<void(RouterConfig&)> two_versions(const TestHttpServer& v1, const TestHttpServer& v2,
                                                       const std::string& db) {
  return [&v1, &v2, db](RouterConfig& rc) {
    rc.admin_key = "adm";
    rc.rollout_db = db;
    rc.backends.push_back(*parse_backend(v1.url().to_string() + ",version=v1"));
    rc.backends.push_back(*parse_backend(v2.url().to_string() + ",version=v2"));
  };
}

}  // namespace sluice::router::router_testing
