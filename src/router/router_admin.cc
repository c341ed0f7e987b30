// The admin API (router.h lists its routes) and the changes of membership it and DNS discovery
// make (backend.h: slots and generations).
#include <algorithm>
#include <initializer_list>

#include <fmt/format.h>

#include "common/secret.h"
#include "router/dashboard.h"
#include "router/router_impl.h"

namespace sluice::router {

Result<int> Router::Impl::add_backend(BackendConfig backend, bool ramp) {
  MutexLock lock(membership_mu);
  Result<int> slot;
  {
    // No routing decision sees the slot before its idle connections and what the policy knew
    // of its last replica are cleared (a request that used the old replica learns nothing after).
    MutexLock routing(route_mu);
    slot = pool.add(std::move(backend), ramp);
    if (!slot) return slot;
    clear_idle(*slot);
    if (pool.generation(*slot) != 0) policy->forget(*slot);  // a reused slot
    policy->set_members(pool.members());
  }
  start_checks(*slot);
  return slot;
}

Status Router::Impl::remove_backend(std::string_view name, std::optional<Source> only) {
  MutexLock lock(membership_mu);
  const int slot = pool.find(name);
  if (slot >= 0 && only && pool.config(slot)->source != *only) {
    return Status::error(fmt::format("{} was not added by {}", name, source_name(*only)), StatusCode::kInvalid);
  }
  if (Status s = pool.remove(name); !s.is_ok()) return s;
  clear_idle(slot);
  policy->set_members(pool.members());
  // Its series go with it: a pool that follows DNS through pod restarts would otherwise keep
  // the metrics of every address it ever saw.
  with_metrics([&](Metrics& m) {
    std::erase_if(m.requests, [&](const auto& e) { return std::get<0>(e.first) == name; });
    std::erase_if(m.upstream_errors, [&](const auto& e) { return e.first.first == name; });
    m.e2e.erase(std::string(name));
    m.ttft.erase(std::string(name));
    m.usage.erase(std::string(name));
  });
  return Status();
}

Status Router::Impl::set_weight(std::string_view name, double weight) {
  MutexLock lock(membership_mu);
  if (Status s = pool.set_weight(name, weight); !s.is_ok()) return s;
  policy->set_members(pool.members());
  return Status();
}

std::string Router::Impl::usage_group(std::string_view header_value, bool has_session) {
  MutexLock lock(metrics_mu);
  if (header_value.empty()) {
    std::string group = has_session ? "session" : "none";  // always its own group, counted in the cap
    metrics.usage_groups.insert(group);
    return group;
  }
  std::string group(header_value.substr(0, 128));
  if (metrics.usage_groups.contains(group)) return group;
  if (metrics.usage_groups.size() >= config.max_usage_groups) return "other";
  metrics.usage_groups.insert(group);
  return group;
}

namespace {

Json replica_json(const BackendPool::Stats& b, const Metrics& m) {
  Json r = Json::object();
  r["url"] = b.name;
  r["source"] = source_name(b.source);
  r["state"] = b.draining ? "draining" : !b.up ? "down" : b.ejected ? "ejected" : "up";
  r["up"] = b.up;
  r["ejected"] = b.ejected;
  r["draining"] = b.draining;
  r["weight"] = b.weight;
  r["version"] = b.version;
  r["ramp"] = b.ramp;
  r["in_flight"] = b.in_flight;
  r["waiting"] = b.waiting;
  r["kv_usage"] = b.kv_usage;
  r["ejections"] = b.ejections;
  r["health_check_failures"] = b.health_failures;
  int64_t requests = 0;
  for (const auto& [k, n] : m.requests) {
    if (std::get<0>(k) == b.name) requests += n;
  }
  r["requests"] = requests;
  const auto u = m.usage.find(b.name);
  const Metrics::Usage usage = u == m.usage.end() ? Metrics::Usage{} : u->second;
  r["prompt_tokens"] = usage.prompt_tokens;
  r["cached_tokens"] = usage.cached_tokens;
  r["hit_rate"] = usage.prompt_tokens > 0
                      ? Json(static_cast<double>(usage.cached_tokens) / static_cast<double>(usage.prompt_tokens))
                      : Json(nullptr);
  r["predicted_hit_rate"] =
      usage.prompt_chunks > 0
          ? Json(static_cast<double>(usage.predicted_chunks) / static_cast<double>(usage.prompt_chunks))
          : Json(nullptr);
  return r;
}

// Whether `authorization` is HTTP Basic (RFC 7617) with this password, whatever the user name.
bool basic_password_is(std::string_view authorization, std::string_view password) {
  constexpr std::string_view kBasic = "Basic ";
  if (authorization.size() <= kBasic.size() || !http::iequals(authorization.substr(0, kBasic.size()), kBasic)) return false;
  std::string decoded;
  uint32_t bits = 0;
  int nbits = 0;
  for (char c : authorization.substr(kBasic.size())) {
    int v = c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? c - 'a' + 26 : c >= '0' && c <= '9' ? c - '0' + 52
          : c == '+' ? 62 : c == '/' ? 63 : -1;
    if (c == '=') break;
    if (v < 0) return false;
    bits = (bits << 6) | static_cast<uint32_t>(v);
    nbits += 6;
    if (nbits >= 8) {
      nbits -= 8;
      decoded += static_cast<char>((bits >> nbits) & 0xFF);
    }
  }
  const size_t colon = decoded.find(':');
  return colon != std::string::npos && same_secret(std::string_view(decoded).substr(colon + 1), password);
}

// A body field no route takes: a typo ("weigth") must not pass as a request without it.
std::string unknown_field(const Json& body, std::initializer_list<std::string_view> known) {
  for (const auto& [k, v] : body.items()) {
    if (std::find(known.begin(), known.end(), k) == known.end()) return k;
  }
  return {};
}

// The "url" of an admin request's body, as the pool names it.
Result<std::string> url_of(const Json& body) {
  if (!body.is_object() || !body.contains("url") || !body["url"].is_string()) {
    return Error(StatusCode::kInvalid, "the body must be a JSON object with \"url\": the replica's base URL");
  }
  auto name = backend_name(body["url"].get<std::string>());
  if (!name) return Error(StatusCode::kInvalid, "\"url\": {}", name.error().message());
  return name;
}

}  // namespace

Json Router::Impl::replicas_json() {
  Json list = Json::array();
  const auto stats = pool.stats();
  MutexLock lock(metrics_mu);
  for (const auto& b : stats) list.push_back(replica_json(b, metrics));
  return list;
}

net::awaitable<bool> Router::Impl::dashboard(beast::tcp_stream& client, bhttp::request<bhttp::string_body>& req) {
  const bool keep = req.keep_alive() && !stopping;
  if (config.admin_key.empty()) {
    co_return co_await reply(req, client, 404, "the dashboard is off: start sluice route with --admin-key\n", keep,
                             "text/plain; charset=utf-8");
  }
  const std::string_view auth = req[bhttp::field::authorization];
  if (!bearer_is(auth, config.admin_key) && !basic_password_is(auth, config.admin_key)) {
    Headers challenge;
    challenge.emplace_back("WWW-Authenticate", "Basic realm=\"sluice route\", charset=\"UTF-8\"");
    co_return co_await reply(req, client, 401, "the dashboard needs the admin key (as the password)\n", keep,
                             "text/plain; charset=utf-8", &challenge);
  }
  DashboardData d;
  d.replicas = replicas_json();
  d.policy = std::string(policy->name());
  d.rollout = current_rollout_json(true);
  ShadowReportOptions o;
  o.worst = 5;
  d.now = epoch_now();
  o.since = d.now - 3600;
  d.shadow = co_await shadow_report_off_thread(o);
  Headers extra;
  extra.emplace_back("Cache-Control", "no-store");
  extra.emplace_back("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:");
  co_return co_await reply(req, client, 200, render_dashboard(d), keep, "text/html; charset=utf-8", &extra);
}

net::awaitable<bool> Router::Impl::admin(beast::tcp_stream& client, bhttp::request<bhttp::string_body>& req,
                                         std::string_view path) {
  const bool keep = req.keep_alive() && !stopping;
  if (config.admin_key.empty()) {
    co_return co_await reply(
        req, client, 404,
        error_body("the admin API is off: start sluice route with --admin-key", "invalid_request_error"), keep);
  }
  if (!bearer_is(req[bhttp::field::authorization], config.admin_key)) {
    const bool sent = !req[bhttp::field::authorization].empty();
    Headers challenge;  // RFC 9110 11.6.1: a 401 says how to authenticate
    challenge.emplace_back("WWW-Authenticate", "Bearer");
    co_return co_await reply(req, client, 401,
                             error_body(sent ? "the admin API refused this key: it is not the router's --admin-key"
                                             : "the admin API needs Authorization: Bearer ADMIN_KEY",
                                        "invalid_request_error", "invalid_api_key"),
                             keep, "application/json", &challenge);
  }
  if (path == "/admin/rollouts" || path.starts_with("/admin/rollouts/")) {
    co_return co_await admin_rollouts(client, req, path, keep);
  }
  if (path == "/admin/shadow" || path.starts_with("/admin/shadow/")) {
    co_return co_await admin_shadow(client, req, path, keep);
  }
  const bool get = req.method() == bhttp::verb::get || req.method() == bhttp::verb::head,
             post = req.method() == bhttp::verb::post;
  if (path == "/admin/replicas" && get) {
    Json out = {{"policy", std::string(policy->name())}, {"replicas", replicas_json()}};
    co_return co_await reply(req, client, 200, out.dump(), keep);
  }
  static constexpr std::string_view kOps[] = {"/admin/replicas", "/admin/replicas/remove", "/admin/replicas/drain",
                                              "/admin/replicas/weight"};
  if (std::find(std::begin(kOps), std::end(kOps), path) == std::end(kOps)) {
    co_return co_await reply(req, client, 404,
                             error_body(fmt::format("no admin route {}", path), "invalid_request_error"), keep);
  }
  if (!post) {
    Headers allow;
    allow.emplace_back("Allow", path == "/admin/replicas" ? "GET, HEAD, POST" : "POST");
    co_return co_await reply(req, client, 405, error_body(fmt::format("{} takes POST", path), "invalid_request_error"),
                             keep, "application/json", &allow);
  }
  auto parsed = parse_json(req.body());
  if (const std::string problem = body_problem(parsed); !problem.empty()) {
    co_return co_await reply(req, client, 400, error_body(problem, "invalid_request_error"), keep);
  }
  const Json body = std::move(*parsed);
  auto name = url_of(body);
  if (!name)
    co_return co_await reply(req, client, 400, error_body(name.error().message(), "invalid_request_error"), keep);
  auto bad = [&](std::string message) { return error_body(message, "invalid_request_error"); };
  const std::string unknown = path == "/admin/replicas"         ? unknown_field(body, {"url", "key", "weight", "version"})
                              : path == "/admin/replicas/drain"  ? unknown_field(body, {"url", "drain"})
                              : path == "/admin/replicas/weight" ? unknown_field(body, {"url", "weight"})
                                                                 : unknown_field(body, {"url"});
  if (!unknown.empty()) {
    co_return co_await reply(req, client, 400, bad(fmt::format("unknown field \"{}\" for {}", unknown, path)), keep);
  }
  std::string answer;
  int status = 200;
  if (path == "/admin/replicas") {
    // {"url", "key"?, "weight"?}: parsed as a --backend flag would be.
    std::string spec = *name;
    if (body.contains("key")) {
      if (!body["key"].is_string() || body["key"].get<std::string>().find(',') != std::string::npos) {
        co_return co_await reply(req, client, 400, bad("\"key\" must be a string without commas"), keep);
      }
      if (!body["key"].get<std::string>().empty()) spec += ",key=" + body["key"].get<std::string>();
    }
    if (body.contains("weight")) {
      if (!body["weight"].is_number())
        co_return co_await reply(req, client, 400, bad("\"weight\" must be a number"), keep);
      const double w = body["weight"].get<double>();
      if (!(w >= kMinWeight && w <= kMaxWeight)) {
        co_return co_await reply(req, client, 400,
                                 bad(fmt::format("\"weight\" is between {} and {}, got {}", kMinWeight, kMaxWeight, w)),
                                 keep);
      }
      spec += fmt::format(",weight={}", w);
    }
    if (body.contains("version")) {
      if (!body["version"].is_string() || body["version"].get<std::string>().find(',') != std::string::npos) {
        co_return co_await reply(req, client, 400, bad("\"version\" must be a string without commas"), keep);
      }
      if (!body["version"].get<std::string>().empty()) spec += ",version=" + body["version"].get<std::string>();
    }
    auto backend = parse_backend(spec);
    if (!backend) co_return co_await reply(req, client, 400, bad(backend.error().message()), keep);
    backend->source = Source::kAdmin;
    // The weight was checked above: the pool refuses only a replica that is there already.
    auto slot = add_backend(std::move(*backend), /*ramp=*/true);
    if (!slot) co_return co_await reply(req, client, 409, bad(slot.error().message()), keep);
    status = 201;
  } else {
    if (pool.find(*name) < 0) {
      co_return co_await reply(req, client, 404, bad(fmt::format("no replica {}", *name)), keep);
    }
    Status s;
    if (path == "/admin/replicas/remove") {
      s = remove_backend(*name);
    } else if (path == "/admin/replicas/drain") {
      if (body.contains("drain") && !body["drain"].is_boolean()) {
        co_return co_await reply(req, client, 400, bad("\"drain\" must be true or false"), keep);
      }
      s = pool.drain(*name, !body.contains("drain") || body["drain"].get<bool>());
    } else {
      if (!body.contains("weight") || !body["weight"].is_number()) {
        co_return co_await reply(req, client, 400, bad("\"weight\" must be a number"), keep);
      }
      s = set_weight(*name, body["weight"].get<double>());
    }
    if (!s.is_ok()) co_return co_await reply(req, client, 400, bad(s.message()), keep);
  }
  // The replica as it is now (gone after a removal: its last listing is not kept).
  Json out = {{"url", *name}};
  for (const auto& b : pool.stats()) {
    if (b.name != *name) continue;
    MutexLock lock(metrics_mu);
    out = replica_json(b, metrics);
  }
  if (path == "/admin/replicas/remove") out["removed"] = true;
  co_return co_await reply(req, client, status, out.dump(), keep);
}

}  // namespace sluice::router
