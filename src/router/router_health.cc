// The router's active health checks and its scrapes of the replicas' /metrics (backend.h).
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>

#include "router/resolve.h"
#include "router/router_impl.h"

namespace sluice::router {

net::awaitable<http::HttpResult<http::HttpResponse>> Router::Impl::get(int backend, std::string path) {
  const std::shared_ptr<const BackendConfig> config_of = pool.config(backend);
  const BackendConfig& b = *config_of;
  // A name is looked up under the time limit first: the client's own lookup has none, and a
  // resolver that hangs must fail the check rather than stall it.
  auto resolved = co_await resolve(b.url.host, b.url.port, ms(config.connect_timeout_seconds));
  if (!resolved) {
    co_return std::unexpected(http::HttpError{http::ErrorKind::kConnect, 0, resolved.error().message(), {}});
  }
  // The client is handed the address found, so it does not look the name up again without a
  // limit (its Host header is then the address: these routes are the replica's own, not a
  // virtual host's).
  http::Url url = b.url;
  url.host = resolved->front().address().to_string();
  http::HttpOptions o;
  o.connect_timeout = ms(std::min(config.connect_timeout_seconds, config.health_timeout_seconds));
  o.request_timeout = ms(config.health_timeout_seconds);
  http::HttpConnection c(co_await net::this_coro::executor, url, o);
  http::HttpRequest r;
  r.target = b.url.target(path);
  if (!b.api_key.empty()) r.headers.push_back({"Authorization", "Bearer " + b.api_key});
  co_return co_await c.request(r);
}

void Router::Impl::start_checks(int backend) {
  const uint64_t generation = pool.generation(backend);
  net::co_spawn(net::make_strand(ioc), health_loop(backend, generation), net::detached);
  if (config.metrics_interval_seconds > 0) {
    net::co_spawn(net::make_strand(ioc), scrape_loop(backend, generation), net::detached);
  }
}

net::awaitable<void> Router::Impl::health_loop(int backend, uint64_t generation) {
  auto ex = co_await net::this_coro::executor;
  int64_t checks = 0, passing_since_models = 0;
  bool models_known = false;
  while (!stopping && pool.generation(backend) == generation) {
    auto got = co_await get(backend, "/health");
    // A server without the route (404) is alive all the same; a 5xx (draining) or no answer is not.
    const bool passed = got.has_value() || (got.error().kind == http::ErrorKind::kStatus && got.error().status == 404);
    if (pool.generation(backend) != generation) break;
    pool.health_check(backend, passed, generation);
    // A replica without a version label is labelled by what it reports: its model id, and its
    // system_fingerprint where it has one (sluice's changes with the model file and the engine
    // configuration), "id@fingerprint". Asked again every tenth check: a replica restarted with
    // another model changes version.
    // The models it lists (routing by model) are asked at each passing check until an answer
    // comes, then every tenth passing check.
    const std::shared_ptr<const BackendConfig> now = pool.config(backend);
    const bool learn_version = config.learn_versions && (now->version.empty() || now->version_reported);
    const bool ask_models = config.route_by_model && passed && (!models_known || passing_since_models >= 10);
    if (ask_models || (passed && learn_version && (now->version.empty() || checks % 10 == 0))) {
      auto models = co_await get(backend, "/v1/models");
      if (models) {
        learn_models(backend, generation, models->body);
        models_known = true;
        passing_since_models = 0;
      }
      if (auto listed = models && learn_version ? http::first_listed_model(models->body) : std::nullopt) {
        std::string version = listed->id;
        if (!listed->system_fingerprint.empty()) version += "@" + listed->system_fingerprint;
        pool.set_reported_version(backend, std::move(version), generation);
      }
    }
    ++checks;
    passing_since_models += passed;
    net::steady_timer t(ex, ms(config.health_interval_seconds));
    co_await t.async_wait(kTuple);
  }
}

void Router::Impl::learn_models(int backend, uint64_t generation, std::string_view body) {
  const auto j = parse_json(body);
  if (!j || !j->is_object() || !j->contains("data") || !(*j)["data"].is_array()) return;
  std::vector<std::string> ids;
  for (const Json& m : (*j)["data"]) {
    if (m.is_object() && m.contains("id") && m["id"].is_string()) ids.push_back(m["id"].get<std::string>());
  }
  MutexLock lock(route_mu);
  if (pool.generation(backend) == generation) served_models[backend] = {generation, std::move(ids)};
}

net::awaitable<void> Router::Impl::scrape_loop(int backend, uint64_t generation) {
  auto ex = co_await net::this_coro::executor;
  while (!stopping && pool.generation(backend) == generation) {
    auto got = co_await get(backend, "/metrics");
    if (got && pool.generation(backend) == generation) {
      // sluice's names, then vLLM's.
      double waiting = 0, kv = 0;
      std::string_view text = got->body;
      while (!text.empty()) {
        const size_t nl = text.find('\n');
        const std::string_view line = text.substr(0, nl);
        text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
        if (line.starts_with("#")) continue;
        const size_t space = line.rfind(' ');
        if (space == std::string_view::npos) continue;
        const std::string_view name = line.substr(0, line.find_first_of("{ "));
        const double value = std::atof(std::string(line.substr(space + 1)).c_str());
        if (name == "sluice_num_requests_waiting" || name == "vllm:num_requests_waiting") waiting += value;
        if (name == "sluice_kv_cache_usage_ratio" || name == "vllm:gpu_cache_usage_perc" ||
            name == "vllm:kv_cache_usage_perc") {
          kv = std::max(kv, value);
        }
      }
      pool.set_reported_load(backend, static_cast<int64_t>(waiting), kv, generation);
    }
    net::steady_timer t(ex, ms(config.metrics_interval_seconds));
    co_await t.async_wait(kTuple);
  }
}
}  // namespace sluice::router
