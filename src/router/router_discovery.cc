// DNS discovery (discovery.h): one loop per --discover name.
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <fmt/format.h>

#include "router/resolve.h"
#include "router/router_impl.h"

namespace sluice::router {

net::awaitable<void> Router::Impl::discovery_loop(DiscoveryConfig d) {
  auto ex = co_await net::this_coro::executor;
  std::set<std::string> known;  // the replicas this discovery added and still holds
  for (bool first = true; !stopping; first = false) {
    auto endpoints = co_await resolve(d.host, d.port, ms(config.connect_timeout_seconds));
    if (stopping) break;
    with_metrics([&](Metrics& m) {
      auto& [ok, failed] = m.resolutions[d.spec];
      ++(endpoints ? ok : failed);
    });
    if (endpoints) {
      std::vector<std::string> resolved;
      for (const tcp::endpoint& e : *endpoints) {
        const auto address = e.address();
        // A link-local IPv6 address needs its interface, which a URL cannot carry.
        if (address.is_v6() && address.to_v6().is_link_local()) continue;
        resolved.push_back(discovered_url(address.to_string(), address.is_v6(), d.port));
      }
      const MembershipChange change = reconcile(known, resolved);
      for (const std::string& url : change.remove) {
        known.erase(url);
        // Removed by the admin API already, or since added again by it: not ours to remove.
        if (!remove_backend(url, Source::kDns).is_ok()) continue;
        fmt::print(stderr, "sluice route: {} no longer lists {}: removed\n", d.host, url);
      }
      for (const std::string& url : change.add) {
        if (pool.find(url) >= 0) continue;  // given with --backend or by the admin API: not ours
        auto b = parse_backend(url);
        if (!b) continue;
        b->api_key = d.api_key;
        b->weight = d.weight;
        b->source = Source::kDns;
        if (add_backend(std::move(*b), /*ramp=*/!first)) {
          known.insert(url);
          fmt::print(stderr, "sluice route: {} lists {}: added\n", d.host, url);
        }
      }
    } else {
      fmt::print(stderr, "sluice route: --discover {}: {} (the replicas stay as they were)\n", d.spec,
                 endpoints.error().message());
    }
    net::steady_timer t(ex, ms(config.discover_interval_seconds));
    co_await t.async_wait(kTuple);
  }
}

}  // namespace sluice::router
