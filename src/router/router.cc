#include "router/router.h"

#include <algorithm>
#include <map>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <fmt/format.h>

#include "common/secret.h"
#include "router/router_impl.h"

namespace sluice::router {

std::string_view reason(int status) {
  // Beast's table of the registered codes ("415 Unsupported Media Type"; RFC 9110 15).
  const std::string_view r = bhttp::obsolete_reason(bhttp::int_to_status(static_cast<unsigned>(status)));
  return r.starts_with('<') ? "Status" : r;  // "<unknown-status>"
}

std::string error_body(std::string_view message, std::string_view type, std::string_view code) {
  Json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!code.empty()) e["code"] = code;
  return Json{{"error", e}}.dump(-1, ' ', false, Json::error_handler_t::replace);  // a path may not be UTF-8
}

std::string body_problem(const std::expected<Json, JsonError>& parsed) {
  if (!parsed) {
    return parsed.error().byte > 0
               ? fmt::format("the body is not JSON: {} at byte {}", parsed.error().message, parsed.error().byte)
               : fmt::format("the body is not JSON: {}", parsed.error().message);
  }
  return parsed->is_object() ? std::string()
                             : fmt::format("the body must be a JSON object, got {}", parsed->type_name());
}

namespace {

std::string head(int status, std::string_view content_type, size_t length, bool keep_alive,
                 const std::vector<std::pair<std::string, std::string>>& extra) {
  std::string h = fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n", status, reason(status),
                              content_type, length);
  for (const auto& [k, v] : extra) h += fmt::format("{}: {}\r\n", k, v);
  h += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  return h;
}


}  // namespace

net::awaitable<bool> respond(beast::tcp_stream& client, int status, std::string body, bool keep_alive,
                             std::string_view content_type, const Headers* extra, bool head_only) {
  static const Headers kNone;
  std::string out = head(status, content_type, body.size(), keep_alive, extra ? *extra : kNone);
  if (!head_only) out += body;
  client.expires_after(std::chrono::seconds(60));
  auto [ec, n] = co_await net::async_write(client, net::buffer(out), kTuple);
  client.expires_never();
  co_return !ec && keep_alive;
}

Router::Impl::ClientVersions Router::Impl::client_versions() {
  if (rollout_store || !config.follow_url.empty()) {
    MutexLock lock(rollout_mu);
    if (rollout.has_value()) return {{rollout->spec().stable, rollout->spec().candidate}, {}};
  }
  MutexLock lock(shadow_mu);
  return {{}, shadow_config.fraction > 0 ? shadow_config.version : std::string()};
}

int Router::Impl::num_answering() {
  const ClientVersions answering = client_versions();
  int n = 0;
  for (const BackendView& v : pool.snapshot()) n += v.available && answering.admits(pool.config(v.index)->version);
  return n;
}

net::awaitable<void> Router::Impl::accept_loop() {
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(kTuple);
    if (ec) {
      if (stopping || ec == net::error::operation_aborted) co_return;
      continue;  // e.g. too many open files: try again
    }
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    net::co_spawn(net::make_strand(ioc), serve(std::move(socket)), net::detached);
  }
}

namespace {

bool is_api_path(std::string_view path) {
  return path.starts_with("/v1/") || path == "/tokenize" || path == "/detokenize";
}

}  // namespace

std::optional<Router::Impl::Refusal> Router::Impl::refuse_before_body(const bhttp::request<bhttp::string_body>& req) {
  // HTTP/1.1 requires Host (RFC 9112 3.2); a body in a coding other than chunked (gzip, chunked)
  // would be relayed as if it were plain (RFC 9112 6.1: 501).
  if (req.version() >= 11 && req.find(bhttp::field::host) == req.end()) {
    return Refusal{400, error_body("an HTTP/1.1 request needs a Host header", "invalid_request_error"), {}};
  }
  // One Host, one Authorization (as sluice serve): with two, the router and a replica could
  // each read another one.
  for (bhttp::field f : {bhttp::field::host, bhttp::field::authorization}) {
    if (req.count(f) > 1) {
      return Refusal{400,
                     error_body(fmt::format("the request has more than one {} header", bhttp::to_string(f)),
                                "invalid_request_error"),
                     {}};
    }
  }
  const auto te = req.find(bhttp::field::transfer_encoding);
  // HTTP/1.0 has no transfer codings: its framing is faulty, whatever Content-Length says (RFC 9112 6.1).
  if (te != req.end() && req.version() < 11) {
    return Refusal{400, error_body("an HTTP/1.0 request cannot use Transfer-Encoding", "invalid_request_error"), {}};
  }
  if (te != req.end() && !http::iequals(te->value(), "chunked")) {
    return Refusal{501,
                   error_body(fmt::format("Transfer-Encoding '{}' is not supported (only chunked)", std::string(te->value())),
                              "invalid_request_error"),
                   {}};
  }
  const std::string_view target = req.target();
  if (is_api_path(target.substr(0, target.find('?'))) && !config.api_key.empty() &&
      !bearer_is(req[bhttp::field::authorization], config.api_key)) {
    return Refusal{401,
                   error_body("a valid API key is needed: Authorization: Bearer KEY", "invalid_request_error",
                              "invalid_api_key"),
                   {{"WWW-Authenticate", "Bearer"}}};
  }
  return std::nullopt;
}

net::awaitable<void> Router::Impl::serve(tcp::socket socket) {
  beast::tcp_stream client(std::move(socket));
  beast::flat_buffer buffer;
  for (;;) {
    bhttp::request_parser<bhttp::string_body> parser;
    parser.body_limit(config.max_body_bytes);
    parser.header_limit(64 << 10);
    client.expires_after(ms(config.idle_timeout_seconds));
    auto [ec, n] = co_await bhttp::async_read_header(client, buffer, parser, kTuple);
    // What the header alone refuses is answered before the body is read (and the connection
    // closed: the body, unread, is in the way of a next request).
    if (!ec) {
      if (std::optional<Refusal> no = refuse_before_body(parser.get())) {
        const bool head_only = parser.get().method() == bhttp::verb::head;
        co_await respond(client, no->status, no->body, false, "application/json", &no->headers, head_only);
        break;
      }
    }
    // A client that sends its body only once told to (Expect: 100-continue, RFC 9110 10.1.1; curl
    // does past 1 MiB) is told so: it waited a second for nothing, or for ever. (An HTTP/1.0
    // request's expectation is ignored, as the RFC says.)
    if (!ec && !parser.is_done() && parser.get().version() >= 11 &&
        http::iequals(parser.get()[bhttp::field::expect], "100-continue")) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      auto [wec, wn] = co_await net::async_write(client, net::buffer(kContinue), kTuple);
      ec = wec;
    }
    if (!ec && !parser.is_done()) std::tie(ec, n) = co_await bhttp::async_read(client, buffer, parser, kTuple);
    client.expires_never();
    if (ec == bhttp::error::body_limit) {
      co_await respond(client, 413,
                       error_body(fmt::format("the request body is larger than {} bytes", config.max_body_bytes),
                                  "invalid_request_error"),
                       false);
      break;
    }
    if (ec == bhttp::error::header_limit) {
      co_await respond(client, 431, error_body("the request headers are too large", "invalid_request_error"), false);
      break;
    }
    if (ec) {
      if (ec != bhttp::error::end_of_stream && ec != net::error::eof && ec != beast::error::timeout &&
          ec != net::error::connection_reset && ec != net::error::operation_aborted) {
        co_await respond(client, 400, error_body(fmt::format("bad HTTP request: {}", ec.message()), "invalid_request_error"),
                         false);
      }
      break;
    }
    auto req = parser.release();
    const bool keep = req.keep_alive() && !stopping;
    const bool again = co_await handle(client, buffer, req);
    if (!again || !keep) break;
  }
  beast::error_code ignored;
  client.socket().shutdown(tcp::socket::shutdown_both, ignored);
  client.close();
}

net::awaitable<bool> Router::Impl::handle(beast::tcp_stream& client, beast::flat_buffer& buffer,
                                          bhttp::request<bhttp::string_body>& req) {
  const std::string target(req.target());
  const std::string path = target.substr(0, target.find('?'));
  const bool keep = req.keep_alive() && !stopping;
  const bool api = is_api_path(path);
  // HEAD of the router's own routes: their headers, no body (it would be read as the next answer).
  const bool head_only = req.method() == bhttp::verb::head;
  if (path == "/health") {
    const int up = num_answering();
    const bool ok = up > 0 && !stopping;
    Json health = Json::object();
    health["status"] = ok ? "ok" : (stopping ? "draining" : "no replica available");
    health["replicas_available"] = up;
    health["replicas"] = pool.members().size();
    co_return co_await respond(client, ok ? 200 : 503, health.dump(), keep, "application/json", nullptr, head_only);
  }
  if (path == "/version") {
    Json version = Json::object();
    version["version"] = SLUICE_VERSION;
    co_return co_await respond(client, 200, version.dump(), keep, "application/json", nullptr, head_only);
  }
  if (path == "/metrics") {
    co_return co_await respond(client, 200, metrics_of(*this), keep, "text/plain; version=0.0.4", nullptr, head_only);
  }
  if (path == "/admin" || path.starts_with("/admin/")) co_return co_await admin(client, req, path);
  if (path == "/ui" || path == "/ui/") co_return co_await dashboard(client, req);
  if (path == "/v1/models" && (req.method() == bhttp::verb::get || head_only)) {
    Json list = co_await models();
    if (list["data"].empty()) {
      co_return co_await respond(client, 503, error_body("no replica answered /v1/models", "server_error"), keep,
                                 "application/json", nullptr, head_only);
    }
    co_return co_await respond(client, 200, list.dump(), keep, "application/json", nullptr, head_only);
  }
  if (api) co_return co_await proxy(client, buffer, req);
  co_return co_await respond(client, 404, error_body(fmt::format("no route {}", path), "invalid_request_error"), keep,
                             "application/json", nullptr, head_only);
}

net::awaitable<Json> Router::Impl::models() {
  const auto views = pool.snapshot();
  const ClientVersions answering = client_versions();
  // With a rollout: the versions that take a share of requests now (after a promotion the
  // candidate alone, with its own context length and fingerprint). When none of their replicas
  // answers, requests fall back to the other version (choose()), and so does the list.
  ClientVersions sharing = answering;
  if (rollout_store || !config.follow_url.empty()) {
    MutexLock lock(rollout_mu);
    if (rollout.has_value()) {
      sharing.only.clear();
      if (rollout->stable_has_share()) sharing.only.push_back(rollout->spec().stable);
      if (rollout->candidate_has_share()) sharing.only.push_back(rollout->spec().candidate);
    }
  }
  Json data = Json::array();
  const ClientVersions* const order[] = {&sharing, &answering};
  for (const ClientVersions* versions : order) {
    std::vector<std::string> seen;
    for (const BackendView& v : views) {
      if (!v.available || !versions->admits(pool.config(v.index)->version)) continue;
      auto got = co_await get(v.index, "/v1/models");
      if (!got) continue;
      auto body = parse_json(got->body);
      if (!body || !body->is_object() || !(*body)["data"].is_array()) continue;
      for (const Json& m : (*body)["data"]) {
        if (!m.is_object() || !m.contains("id") || !m["id"].is_string()) continue;
        const std::string id = m["id"].get<std::string>();
        if (std::find(seen.begin(), seen.end(), id) != seen.end()) continue;
        seen.push_back(id);
        data.push_back(m);
      }
    }
    if (!data.empty() || sharing.only == answering.only) break;
  }
  co_return Json{{"object", "list"}, {"data", data}};
}

Result<std::unique_ptr<Router>> Router::create(RouterConfig config) {
  if (config.backends.empty() && config.discover.empty()) {
    return Error(StatusCode::kInvalid, "no backend: give --backend URL (or --backends-file FILE, or --discover dns:NAME:PORT)");
  }
  for (size_t i = 0; i < config.backends.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (config.backends[i].name == config.backends[j].name) {
        return Error(StatusCode::kInvalid, "backend {} is given twice", config.backends[i].name);
      }
    }
  }
  if (config.threads < 1) return Error(StatusCode::kInvalid, "threads must be >= 1, got {}", config.threads);
  if (!config.admin_key.empty() && config.admin_key == config.api_key) {
    return Error(StatusCode::kInvalid, "the admin key must differ from the API key: a client could change the replicas otherwise");
  }
  if (!(config.policy_options.load_factor >= 1.0)) {
    return Error(StatusCode::kInvalid, "the load factor must be >= 1, got {}", config.policy_options.load_factor);
  }
  if (config.shadow.fraction > 0) {
    if (config.shadow.version.empty()) return Error(StatusCode::kInvalid, "shadow traffic needs the version copies go to");
    bool found = !config.discover.empty();  // discovered replicas carry no label yet: not checked
    for (const BackendConfig& b : config.backends) found = found || b.version == config.shadow.version;
    if (!found) {
      return Error(StatusCode::kInvalid, "--shadow {}: no replica has that version (label replicas with --backend "
                   "URL,version=V)", config.shadow.version);
    }
    const auto shadowed = [&](const BackendConfig& b) { return b.version == config.shadow.version; };
    if (versions_known(config) && std::ranges::all_of(config.backends, shadowed)) {
      return Error(StatusCode::kInvalid, "--shadow {}: every replica has that version, and none would be left to "
                   "answer clients", config.shadow.version);
    }
  }
  // The noise arm copies to a second replica of the version that answered.
  if (config.shadow.noise_fraction > 0 && versions_known(config)) {
    std::map<std::string, int> replicas;
    for (const BackendConfig& b : config.backends) {
      if (b.version != config.shadow.version) ++replicas[b.version];
    }
    if (std::ranges::none_of(replicas, [](const auto& v) { return v.second >= 2; })) {
      return Error(StatusCode::kInvalid, "--shadow-noise copies a request to a second replica of the version that "
                   "answered it, and no version has two replicas");
    }
  }
  auto impl = std::make_unique<Impl>(std::move(config));
  auto policy = make_policy(impl->config.policy, impl->pool.members(), impl->config.policy_options);
  if (!policy) return Error(policy.error());
  impl->policy = std::move(*policy);
  if (!impl->config.follow_url.empty()) {
    if (!impl->config.rollout_db.empty()) {
      return Error(StatusCode::kInvalid, "--follow and --rollout-db exclude each other: one router runs the rollouts, "
                   "the others follow it");
    }
    auto url = http::parse_url(impl->config.follow_url);
    if (!url) return Error(StatusCode::kInvalid, "--follow: {}", url.error().message());
    if (impl->config.admin_key.empty()) {
      return Error(StatusCode::kInvalid, "--follow needs --admin-key: the controller's admin key, to read its rollouts");
    }
    if (!(impl->config.follow_interval_seconds > 0)) return Error(StatusCode::kInvalid, "the follow interval must be > 0");
  }
  if (Status s = impl->open_rollouts(); !s) return Error(s.with_context("--rollout-db"));
  if (Status s = impl->open_shadow(); !s) return Error(s.with_context("--shadow-db"));
  beast::error_code ec;
  const auto address = net::ip::make_address(impl->config.host, ec);
  if (ec) return Error(StatusCode::kInvalid, "cannot listen on '{}': not an IP address", impl->config.host);
  const tcp::endpoint endpoint(address, impl->config.port);
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return Error(StatusCode::kUnavailable, "cannot listen on {}:{}: {}", impl->config.host, impl->config.port,
                 ec.message());
  }
  impl->port = impl->acceptor.local_endpoint().port();
  return std::unique_ptr<Router>(new Router(std::move(impl)));
}

Router::Router(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Router::~Router() {
  request_shutdown();
  for (std::thread& t : impl_->threads) t.join();
  if (impl_->drainer.joinable()) impl_->drainer.join();
  if (impl_->shadow_thread.joinable()) impl_->shadow_thread.join();
  if (impl_->eval_thread.joinable()) impl_->eval_thread.join();  // its requests have their own timeouts
  impl_->stop_rollout_writer();  // after every thread that queues for the store
  // What is left of the requests (frames on `ioc`) is destroyed with the members, shadow_ioc
  // before ioc: from here on no copy is told its primary's answer.
  impl_->torn_down = true;
}

uint16_t Router::port() const { return impl_->port; }
const BackendPool& Router::backends() const { return impl_->pool; }

void Router::start() {
  Impl& s = *impl_;
  net::co_spawn(s.ioc, s.accept_loop(), net::detached);
  for (size_t b = 0; b < s.pool.size(); ++b) s.start_checks(static_cast<int>(b));
  for (const DiscoveryConfig& d : s.config.discover) net::co_spawn(net::make_strand(s.ioc), s.discovery_loop(d), net::detached);
  if (s.rollout_store) {
    s.rollout_writer = std::thread([&s] { s.rollout_writer_loop(); });
    net::co_spawn(net::make_strand(s.ioc), s.rollout_loop(), net::detached);
  }
  if (!s.config.follow_url.empty()) net::co_spawn(net::make_strand(s.ioc), s.follow_loop(), net::detached);
  s.signals.async_wait([this](const beast::error_code& ec, int) {
    if (!ec) request_shutdown();
  });
  for (int i = 0; i < s.config.threads; ++i) s.threads.emplace_back([&s] { s.ioc.run(); });
  s.shadow_thread = std::thread([&s] { s.shadow_ioc.run(); });
}

void Router::request_shutdown() {
  Impl& s = *impl_;
  if (s.stopping.exchange(true)) return;
  net::post(s.ioc, [&s] {
    beast::error_code ignored;
    s.acceptor.close(ignored);
    s.signals.cancel(ignored);
  });
  // In-flight requests finish for up to drain_seconds; then everything stops.
  s.drainer = std::thread([&s] {
    const auto until = Clock::now() + ms(s.config.drain_seconds);
    while (s.in_flight.load() > 0 && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    s.ioc.stop();
    s.shadow_work.reset();
    s.shadow_ioc.stop();  // copies still in flight are abandoned: nobody waits for a shadow
  });
}

void Router::run_until_shutdown() {
  for (std::thread& t : impl_->threads) t.join();
  impl_->threads.clear();
}
}  // namespace sluice::router
