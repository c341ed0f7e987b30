#include "router/router.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cmath>
#include <map>
#include <random>
#include <thread>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include "common/http_client.h"
#include "common/json.h"

namespace sluice::router {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using Json = nlohmann::ordered_json;
constexpr auto kTuple = net::as_tuple(net::use_awaitable);

std::chrono::milliseconds ms(double seconds) { return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)); }

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Status";
  }
}

// An error body in OpenAI's shape.
std::string error_body(std::string_view message, std::string_view type, std::string_view code = {}) {
  Json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!code.empty()) e["code"] = code;
  return Json{{"error", e}}.dump(-1, ' ', false, Json::error_handler_t::replace);  // a path may not be UTF-8
}

// The text a prompt starts with, for the prefix index: a completion's prompt (strings of a list
// joined), a chat's messages as role and content in order.
std::string prompt_text(const Json& body) {
  std::string text;
  if (!body.is_object()) return text;
  if (auto p = body.find("prompt"); p != body.end()) {
    if (p->is_string()) text = p->get<std::string>();
    if (p->is_array()) {
      for (const Json& s : *p) {
        if (s.is_string()) text += s.get<std::string>();
      }
    }
  }
  if (auto m = body.find("messages"); m != body.end() && m->is_array()) {
    for (const Json& msg : *m) {
      if (!msg.is_object()) continue;
      if (auto r = msg.find("role"); r != msg.end() && r->is_string()) text += r->get<std::string>() + "\n";
      if (auto c = msg.find("content"); c != msg.end()) {
        if (c->is_string()) text += c->get<std::string>();
        if (c->is_array()) {
          for (const Json& part : *c) {
            if (part.is_object() && part.contains("text") && part["text"].is_string()) text += part["text"].get<std::string>();
          }
        }
      }
      text += "\n";
    }
  }
  return text;
}

// Histogram buckets of request seconds.
constexpr std::array<double, 14> kBuckets = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};

struct Histogram {
  std::array<int64_t, kBuckets.size()> counts{};
  int64_t count = 0;
  double sum = 0;
  void observe(double s) {
    for (size_t i = 0; i < kBuckets.size(); ++i) counts[i] += s <= kBuckets[i];
    ++count;
    sum += s;
  }
};

struct Metrics {
  std::map<std::tuple<std::string, std::string, int>, int64_t> requests;  // (backend, decision, status)
  std::map<std::string, Histogram> e2e, ttft;                             // per backend
  int64_t retries = 0;
  int64_t client_disconnects = 0;
  int64_t no_backend = 0;         // answered 503/429 without a replica
  int64_t stream_errors = 0;      // streams ended by an upstream failure
  std::map<std::pair<std::string, std::string>, int64_t> upstream_errors;  // (backend, kind)
  // The warm cache hit rate as the replicas report it (usage) and as the router predicted it.
  struct Usage {
    int64_t prompt_tokens = 0, cached_tokens = 0, with_usage = 0;
    int64_t prompt_chunks = 0, predicted_chunks = 0;
  };
  std::map<std::string, Usage> usage;  // per backend
};

// usage.prompt_tokens and usage.prompt_tokens_details.cached_tokens of an answer or a chunk.
bool read_usage(const Json& j, int64_t& prompt, int64_t& cached) {
  if (!j.is_object() || !j.contains("usage") || !j["usage"].is_object()) return false;
  const Json& u = j["usage"];
  if (!u.contains("prompt_tokens") || !u["prompt_tokens"].is_number_integer()) return false;
  prompt = u["prompt_tokens"].get<int64_t>();
  cached = 0;
  if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object() &&
      u["prompt_tokens_details"].contains("cached_tokens") &&
      u["prompt_tokens_details"]["cached_tokens"].is_number_integer()) {
    cached = u["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
  }
  return true;
}

// What a client asked for, as the router relays it.
struct Exchange {
  bhttp::request<bhttp::string_body>& req;
  RouteRequest route;
  bool stream = false;
  bool keep_alive = true;  // the client's connection may serve another request after this one
  bool fresh = false;      // connect anew rather than reuse an idle connection
  std::string body;        // as sent upstream (a stream asks for usage)
  bool strip_usage = false;  // the usage chunk was the router's request: not relayed
  int64_t prompt_tokens = -1, cached_tokens = 0;  // from the answer's usage, when it had one
};

// Decrements a counter when it goes out of scope.
struct CountGuard {
  std::atomic<int64_t>& n;
  explicit CountGuard(std::atomic<int64_t>& c) : n(c) { n.fetch_add(1); }
  ~CountGuard() { n.fetch_sub(1); }
};

// The result of one attempt on one replica.
struct Attempt {
  enum Kind { kRelayed, kClientGone, kRetryable, kFailed } kind = kFailed;
  int status = 0;                 // an upstream answer held back (kRetryable/kFailed with a body)
  std::string body, content_type, retry_after;
  std::string error_kind;         // "connect", "closed", "timeout", "protocol": no answer
  bool keep_alive = true;         // the client connection may serve another request
  bool released = false;          // the replica's in-flight count was already given back
  bool stale = false;             // a reused idle connection the replica had closed: not its failure
};

// A relayed answer's outcome for the replica's health: 5xx is failure, 429 load.
Outcome outcome_of(int status) {
  if (status == 429) return Outcome::kOverloaded;
  return status >= 500 ? Outcome::kFailure : Outcome::kSuccess;
}

}  // namespace

struct Router::Impl {
  explicit Impl(RouterConfig c)
      : config(std::move(c)), pool(config.backends, config.health), idle(config.backends.size()) {}

  RouterConfig config;
  BackendPool pool;
  std::unique_ptr<Policy> policy;
  net::io_context ioc;
  tcp::acceptor acceptor{ioc};
  net::signal_set signals{ioc, SIGINT, SIGTERM};
  std::vector<std::thread> threads;
  std::thread drainer;  // request_shutdown(): stops the io_context once in-flight requests are done
  std::atomic<bool> stopping{false};
  std::atomic<int64_t> in_flight{0}, retries_in_flight{0};
  uint16_t port = 0;

  // Idle keep-alive connections to each replica, reused by later requests.
  Mutex idle_mu;
  std::vector<std::vector<std::unique_ptr<beast::tcp_stream>>> idle SLUICE_GUARDED_BY(idle_mu);

  mutable Mutex metrics_mu;
  Metrics metrics SLUICE_GUARDED_BY(metrics_mu);

  Mutex rng_mu;
  std::mt19937_64 rng SLUICE_GUARDED_BY(rng_mu){std::random_device{}()};

  net::awaitable<void> accept_loop();
  net::awaitable<void> serve(tcp::socket socket);
  net::awaitable<bool> handle(beast::tcp_stream& client, beast::flat_buffer& buffer,
                              bhttp::request<bhttp::string_body>& req);
  net::awaitable<bool> proxy(beast::tcp_stream& client, beast::flat_buffer& buffer,
                             bhttp::request<bhttp::string_body>& req);
  net::awaitable<Attempt> attempt(int backend, beast::tcp_stream& client, beast::flat_buffer& buffer, Exchange& x,
                                  double& ttft);
  net::awaitable<Json> models();
  // GET `path` of a replica on a connection of its own, with the health timeout.
  net::awaitable<http::HttpResult<http::HttpResponse>> get(int backend, std::string path);
  net::awaitable<void> health_loop(int backend);
  net::awaitable<void> scrape_loop(int backend);

  std::unique_ptr<beast::tcp_stream> take_idle(int backend) {
    MutexLock lock(idle_mu);
    if (idle[backend].empty()) return nullptr;
    auto s = std::move(idle[backend].back());
    idle[backend].pop_back();
    return s;
  }
  void give_idle(int backend, std::unique_ptr<beast::tcp_stream> s) {
    MutexLock lock(idle_mu);
    if (idle[backend].size() < 64) idle[backend].push_back(std::move(s));
  }
  void count(const std::string& backend, DecisionKind kind, int status) {
    MutexLock lock(metrics_mu);
    ++metrics.requests[{backend, std::string(decision_kind_name(kind)), status}];
  }
  template <typename F>
  void with_metrics(F f) {
    MutexLock lock(metrics_mu);
    f(metrics);
  }
  std::chrono::milliseconds jitter(int attempt) {
    MutexLock lock(rng_mu);
    return std::chrono::milliseconds(rng() % static_cast<uint64_t>(5 << std::min(attempt, 6)));
  }
};

namespace {

std::string head(int status, std::string_view content_type, size_t length, bool keep_alive,
                 const std::vector<std::pair<std::string, std::string>>& extra) {
  std::string h = fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n", status, reason(status),
                              content_type, length);
  for (const auto& [k, v] : extra) h += fmt::format("{}: {}\r\n", k, v);
  h += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  return h;
}

using Headers = std::vector<std::pair<std::string, std::string>>;

// NOTE: g++ 12 destroys a braced temporary inside a co_await expression twice (see
// http_client.h): callers build bodies and headers first, and pass headers by pointer.
net::awaitable<bool> respond(beast::tcp_stream& client, int status, std::string body, bool keep_alive,
                             std::string_view content_type = "application/json", const Headers* extra = nullptr) {
  static const Headers kNone;
  std::string out = head(status, content_type, body.size(), keep_alive, extra ? *extra : kNone) + body;
  client.expires_after(std::chrono::seconds(60));
  auto [ec, n] = co_await net::async_write(client, net::buffer(out), kTuple);
  client.expires_never();
  co_return !ec && keep_alive;
}

}  // namespace

namespace {

std::string label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// The router's /metrics, in the Prometheus text format, every name prefixed sluice_router_.
std::string metrics_of(const Router::Impl& s) {
  std::string out;
  auto family = [&](std::string_view name, std::string_view type, std::string_view help) {
    out += fmt::format("# HELP sluice_router_{} {}\n# TYPE sluice_router_{} {}\n", name, help, name, type);
  };
  const auto stats = s.pool.stats();
  family("backend_up", "gauge", "1 while the replica passes its health checks.");
  for (const auto& b : stats) out += fmt::format("sluice_router_backend_up{{backend=\"{}\"}} {}\n", label(b.name), b.up ? 1 : 0);
  family("backend_ejected", "gauge", "1 while the replica is ejected for failures in a row.");
  for (const auto& b : stats) out += fmt::format("sluice_router_backend_ejected{{backend=\"{}\"}} {}\n", label(b.name), b.ejected ? 1 : 0);
  family("backend_in_flight", "gauge", "Requests the router has in flight at the replica.");
  for (const auto& b : stats) out += fmt::format("sluice_router_backend_in_flight{{backend=\"{}\"}} {}\n", label(b.name), b.in_flight);
  family("backend_waiting", "gauge", "Waiting requests the replica reported on its /metrics.");
  for (const auto& b : stats) out += fmt::format("sluice_router_backend_waiting{{backend=\"{}\"}} {}\n", label(b.name), b.waiting);
  family("backend_kv_usage_ratio", "gauge", "KV cache usage the replica reported, 0..1.");
  for (const auto& b : stats) out += fmt::format("sluice_router_backend_kv_usage_ratio{{backend=\"{}\"}} {}\n", label(b.name), b.kv_usage);
  family("ejections_total", "counter", "Times the replica was ejected for failures in a row.");
  for (const auto& b : stats) out += fmt::format("sluice_router_ejections_total{{backend=\"{}\"}} {}\n", label(b.name), b.ejections);
  family("health_check_failures_total", "counter", "Failed active health checks.");
  for (const auto& b : stats) out += fmt::format("sluice_router_health_check_failures_total{{backend=\"{}\"}} {}\n", label(b.name), b.health_failures);
  MutexLock lock(s.metrics_mu);
  const Metrics& m = s.metrics;
  family("requests_total", "counter", "Requests by replica, policy decision and status (499: the client went away).");
  for (const auto& [k, n] : m.requests) {
    out += fmt::format("sluice_router_requests_total{{backend=\"{}\",decision=\"{}\",status=\"{}\"}} {}\n",
                       label(std::get<0>(k)), std::get<1>(k), std::get<2>(k), n);
  }
  family("upstream_errors_total", "counter", "Attempts that got no answer from the replica, by kind.");
  for (const auto& [k, n] : m.upstream_errors) {
    out += fmt::format("sluice_router_upstream_errors_total{{backend=\"{}\",kind=\"{}\"}} {}\n", label(k.first), k.second, n);
  }
  family("retries_total", "counter", "Requests sent again to another replica.");
  out += fmt::format("sluice_router_retries_total {}\n", m.retries);
  family("client_disconnects_total", "counter", "Requests cancelled upstream because the client went away.");
  out += fmt::format("sluice_router_client_disconnects_total {}\n", m.client_disconnects);
  family("unrouted_total", "counter", "Requests answered 503 or 429 by the router itself: no replica could take them.");
  out += fmt::format("sluice_router_unrouted_total {}\n", m.no_backend);
  family("stream_errors_total", "counter", "Streams ended with an error event because the replica failed mid-stream.");
  out += fmt::format("sluice_router_stream_errors_total {}\n", m.stream_errors);
  auto histograms = [&](std::string_view name, std::string_view help, const std::map<std::string, Histogram>& hs) {
    family(name, "histogram", help);
    for (const auto& [backend, h] : hs) {
      for (size_t i = 0; i < kBuckets.size(); ++i) {
        out += fmt::format("sluice_router_{}_bucket{{backend=\"{}\",le=\"{}\"}} {}\n", name, label(backend), kBuckets[i], h.counts[i]);
      }
      out += fmt::format("sluice_router_{}_bucket{{backend=\"{}\",le=\"+Inf\"}} {}\n", name, label(backend), h.count);
      out += fmt::format("sluice_router_{}_sum{{backend=\"{}\"}} {}\n", name, label(backend), h.sum);
      out += fmt::format("sluice_router_{}_count{{backend=\"{}\"}} {}\n", name, label(backend), h.count);
    }
  };
  family("prompt_tokens_total", "counter", "Prompt tokens of answers with usage, per replica.");
  for (const auto& [b, u] : m.usage) out += fmt::format("sluice_router_prompt_tokens_total{{backend=\"{}\"}} {}\n", label(b), u.prompt_tokens);
  family("cached_tokens_total", "counter", "Of those, the tokens the replica served from its prefix cache (usage).");
  for (const auto& [b, u] : m.usage) out += fmt::format("sluice_router_cached_tokens_total{{backend=\"{}\"}} {}\n", label(b), u.cached_tokens);
  family("prompt_chunks_total", "counter", "cache_aware: the 64-byte chunks of those prompts.");
  for (const auto& [b, u] : m.usage) out += fmt::format("sluice_router_prompt_chunks_total{{backend=\"{}\"}} {}\n", label(b), u.prompt_chunks);
  family("predicted_cached_chunks_total", "counter",
         "cache_aware: of those, the chunks the router believed the replica held (against cached/prompt tokens).");
  for (const auto& [b, u] : m.usage) {
    out += fmt::format("sluice_router_predicted_cached_chunks_total{{backend=\"{}\"}} {}\n", label(b), u.predicted_chunks);
  }
  histograms("request_duration_seconds", "From the request read to the last byte relayed, per replica.", m.e2e);
  histograms("time_to_first_byte_seconds", "Streams: from the request sent upstream to its first body bytes.", m.ttft);
  return out;
}

// A write to the client that takes longer than `limit` (a client that stopped reading, its
// socket buffer full) closes its connection, which fails the write: the request is then cancelled
// upstream. (The connection's stream has no write timeout of its own here: it would also end the
// watcher's read, which waits as long as the answer takes.)
net::awaitable<beast::error_code> write_client(beast::tcp_stream& client, std::string_view bytes,
                                               std::chrono::milliseconds limit) {
  auto done = std::make_shared<bool>(false);
  net::steady_timer guard(co_await net::this_coro::executor, limit);
  guard.async_wait([done, &client](const beast::error_code& ec) {
    if (ec || *done) return;  // the write finished first: `client` may be gone by now, untouched
    beast::error_code ignored;
    client.socket().close(ignored);
  });
  auto [ec, n] = co_await net::async_write(client, net::buffer(bytes), kTuple);
  *done = true;
  guard.cancel();
  co_return ec;
}

}  // namespace

std::string Router::metrics_text() const { return metrics_of(*impl_); }

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

net::awaitable<void> Router::Impl::serve(tcp::socket socket) {
  beast::tcp_stream client(std::move(socket));
  beast::flat_buffer buffer;
  for (;;) {
    bhttp::request_parser<bhttp::string_body> parser;
    parser.body_limit(config.max_body_bytes);
    parser.header_limit(64 << 10);
    client.expires_after(ms(config.idle_timeout_seconds));
    auto [ec, n] = co_await bhttp::async_read(client, buffer, parser, kTuple);
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
  const bool api = path.starts_with("/v1/") || path == "/tokenize" || path == "/detokenize";
  if (api && !config.api_key.empty()) {
    const std::string_view auth = req[bhttp::field::authorization];
    if (auth != "Bearer " + config.api_key) {
      co_return co_await respond(client, 401, error_body("a valid API key is needed: Authorization: Bearer KEY",
                                                         "invalid_request_error", "invalid_api_key"),
                                 keep);
    }
  }
  if (path == "/health") {
    const int up = pool.num_available();
    const bool ok = up > 0 && !stopping;
    Json health = Json::object();
    health["status"] = ok ? "ok" : (stopping ? "draining" : "no replica available");
    health["replicas_available"] = up;
    health["replicas"] = pool.size();
    co_return co_await respond(client, ok ? 200 : 503, health.dump(), keep);
  }
  if (path == "/version") {
    Json version = Json::object();
    version["version"] = SLUICE_VERSION;
    co_return co_await respond(client, 200, version.dump(), keep);
  }
  if (path == "/metrics") {
    co_return co_await respond(client, 200, metrics_of(*this), keep, "text/plain; version=0.0.4");
  }
  if (path == "/v1/models" && req.method() == bhttp::verb::get) {
    Json list = co_await models();
    if (list["data"].empty()) {
      co_return co_await respond(client, 503, error_body("no replica answered /v1/models", "server_error"), keep);
    }
    co_return co_await respond(client, 200, list.dump(), keep);
  }
  if (api) co_return co_await proxy(client, buffer, req);
  co_return co_await respond(client, 404, error_body(fmt::format("no route {}", path), "invalid_request_error"), keep);
}

net::awaitable<Json> Router::Impl::models() {
  Json data = Json::array();
  std::vector<std::string> seen;
  const auto views = pool.snapshot();
  for (const BackendView& v : views) {
    if (!v.available) continue;
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
  co_return Json{{"object", "list"}, {"data", data}};
}

net::awaitable<bool> Router::Impl::proxy(beast::tcp_stream& client, beast::flat_buffer& buffer,
                                         bhttp::request<bhttp::string_body>& req) {
  const bool keep = req.keep_alive() && !stopping;
  // Routing hints from the body; a body that is not JSON is relayed all the same (the replica
  // answers it) and routed without hints.
  auto parsed = parse_json(req.body());
  const Json body = parsed ? std::move(*parsed) : Json();
  std::string session;
  for (const std::string& h : config.session_headers) {
    const std::string_view v = req[h];
    if (!v.empty()) {
      session = std::string(v);
      break;
    }
  }
  if (session.empty() && body.is_object() && body.contains("user") && body["user"].is_string()) {
    session = body["user"].get<std::string>();
  }
  const std::string prompt = prompt_text(body);
  Exchange x{req, RouteRequest{session, prompt}, false, keep};
  x.stream = body.is_object() && body.contains("stream") && body["stream"].is_boolean() && body["stream"].get<bool>();
  x.body = req.body();
  if (x.stream) {
    // The router counts every stream's usage (the replicas' cached tokens): it asks for it, and
    // takes the usage chunk out again when the client had not asked.
    const bool asked = body.contains("stream_options") && body["stream_options"].is_object() &&
                       body["stream_options"].contains("include_usage") &&
                       body["stream_options"]["include_usage"] == true;
    if (!asked && (!body.contains("stream_options") || body["stream_options"].is_object())) {
      Json with = body;
      with["stream_options"]["include_usage"] = true;
      x.body = with.dump(-1, ' ', false, Json::error_handler_t::replace);
      x.strip_usage = true;
    }
  }

  // Counted until the answer is written, whoever writes it (the drain waits for it).
  const CountGuard counted(in_flight);
  std::vector<int> tried;
  Attempt last;
  bool saw_overload = false;
  std::string retry_after = "1";
  const auto started = Clock::now();
  for (int a = 0; a < std::max(1, config.max_attempts); ++a) {
    if (a > 0) {
      // The budget bounds retries of answers (429, 5xx: a replica under load, which a retry storm
      // would bury); a replica that died or refused the connection has no load to protect.
      const double budget = std::max(3.0, config.retry_budget * static_cast<double>(in_flight.load()));
      if (last.status != 0 && static_cast<double>(retries_in_flight.load()) >= budget) break;
      retries_in_flight.fetch_add(1);
      with_metrics([](Metrics& m) { ++m.retries; });
      net::steady_timer t(co_await net::this_coro::executor, jitter(a));
      co_await t.async_wait(kTuple);
    }
    const Decision d = policy->choose(x.route, pool.snapshot(), tried);
    if (d.backend < 0) {
      if (a > 0) retries_in_flight.fetch_sub(1);
      break;
    }
    tried.push_back(d.backend);
    const std::string& name = pool.config(d.backend).name;
    pool.begin(d.backend);
    double ttft = -1;
    last = co_await attempt(d.backend, client, buffer, x, ttft);
    if (a > 0) retries_in_flight.fetch_sub(1);
    if (last.stale && !x.fresh) {
      // Once per request, on a fresh connection, not counted as an attempt or a failure.
      x.fresh = true;
      tried.pop_back();
      pool.end(d.backend, Outcome::kCancelled);
      --a;
      continue;
    }
    const bool relayed = last.kind == Attempt::kRelayed;
    const bool overload = last.status == 429;
    saw_overload = saw_overload || overload;
    if (overload && !last.retry_after.empty()) retry_after = last.retry_after;
    Outcome outcome = Outcome::kFailure;
    if (relayed) outcome = outcome_of(last.status);
    if (overload) outcome = Outcome::kOverloaded;
    if (last.kind == Attempt::kClientGone) outcome = Outcome::kCancelled;
    if (!last.released) pool.end(d.backend, outcome);
    policy->routed(x.route, d.backend, relayed && last.status / 100 == 2);
    if (!last.error_kind.empty()) with_metrics([&](Metrics& m) { ++m.upstream_errors[{name, last.error_kind}]; });
    if (relayed || last.kind == Attempt::kClientGone) {
      const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
      if (relayed && x.prompt_tokens >= 0) {
        with_metrics([&](Metrics& m) {
          Metrics::Usage& u = m.usage[name];
          u.prompt_tokens += x.prompt_tokens;
          u.cached_tokens += x.cached_tokens;
          ++u.with_usage;
          u.prompt_chunks += d.prompt_chunks;
          u.predicted_chunks += d.predicted_chunks;
        });
      }
      count(name, d.kind, last.kind == Attempt::kClientGone ? 499 : last.status);
      with_metrics([&](Metrics& m) {
        if (last.kind == Attempt::kClientGone) ++m.client_disconnects;
        if (relayed) m.e2e[name].observe(seconds);
        if (ttft >= 0) m.ttft[name].observe(ttft);
      });
      co_return relayed && last.keep_alive && keep;
    }
    count(name, d.kind, last.status ? last.status : (last.error_kind == "timeout" ? 504 : 502));
    if (last.kind == Attempt::kFailed) break;
  }
  // Nothing was relayed: answer from here.
  if (last.status != 0 && !(saw_overload && last.status == 429)) {
    Headers extra;
    if (!last.retry_after.empty()) extra.emplace_back("Retry-After", last.retry_after);
    const std::string type = last.content_type.empty() ? "application/json" : last.content_type;
    co_return co_await respond(client, last.status, last.body, keep, type, &extra);
  }
  if (saw_overload) {
    with_metrics([](Metrics& m) { ++m.no_backend; });
    Headers extra;
    extra.emplace_back("Retry-After", retry_after);
    co_return co_await respond(client, 429, error_body("every replica is saturated; retry later", "rate_limit_error"),
                               keep, "application/json", &extra);
  }
  if (tried.empty()) {
    with_metrics([](Metrics& m) { ++m.no_backend; });
    co_return co_await respond(client, 503, error_body("no replica is available", "server_error"), keep);
  }
  const bool timeout = last.error_kind == "timeout";
  co_return co_await respond(
      client, timeout ? 504 : 502,
      error_body(fmt::format("no replica answered ({} tried; the last: {})", tried.size(), last.error_kind),
                 "server_error"),
      keep);
}

net::awaitable<Attempt> Router::Impl::attempt(int backend, beast::tcp_stream& client, beast::flat_buffer& buffer,
                                              Exchange& x, double& ttft) {
  const BackendConfig& b = pool.config(backend);
  const auto started = Clock::now();
  auto ex = co_await net::this_coro::executor;
  Attempt result;

  // The request as the replica gets it.
  bhttp::request<bhttp::string_body> up(x.req.method(), b.url.path + std::string(x.req.target()), 11);
  up.set(bhttp::field::host, b.url.authority());
  for (const auto& f : x.req) {
    const std::string_view name = f.name_string();
    // Hop-by-hop headers stay here (RFC 9110 7.6.1), and so does Accept-Encoding: the router
    // relays bodies as they come and does not pass Content-Encoding back.
    static constexpr std::string_view kDropped[] = {"host", "connection", "content-length", "transfer-encoding",
                                                    "keep-alive", "expect", "te", "trailer", "upgrade",
                                                    "proxy-authorization", "proxy-connection", "accept-encoding"};
    if (std::any_of(std::begin(kDropped), std::end(kDropped), [&](std::string_view d) { return iequals(name, d); }) ||
        (iequals(name, "authorization") && !b.api_key.empty())) {
      continue;
    }
    up.insert(name, f.value());
  }
  if (!b.api_key.empty()) up.set(bhttp::field::authorization, "Bearer " + b.api_key);
  up.body() = x.body;
  up.keep_alive(true);
  up.prepare_payload();

  std::unique_ptr<beast::tcp_stream> conn;
  bhttp::response_parser<bhttp::buffer_body> parser;
  beast::flat_buffer ubuf;
  const auto deadline = started + ms(config.upstream_timeout_seconds);
  bool reused = false;
  for (int tries = 0;; ++tries) {
    conn = tries == 0 && !x.fresh ? take_idle(backend) : nullptr;  // a second try: a fresh connection
    reused = conn != nullptr;
    if (!conn) {
      conn = std::make_unique<beast::tcp_stream>(ex);
      tcp::resolver resolver(ex);
      auto [rec, endpoints] = co_await resolver.async_resolve(b.url.host, std::to_string(b.url.port), kTuple);
      if (rec) {
        result.error_kind = "connect";
        result.kind = Attempt::kRetryable;
        co_return result;
      }
      conn->expires_after(ms(config.connect_timeout_seconds));
      auto [cec, endpoint] = co_await conn->async_connect(endpoints, kTuple);
      if (cec) {
        result.error_kind = cec == beast::error::timeout ? "timeout" : "connect";
        result.kind = Attempt::kRetryable;
        co_return result;
      }
      beast::error_code ignored;
      conn->socket().set_option(tcp::no_delay(true), ignored);
    }
    conn->expires_at(deadline);
    auto [wec, wn] = co_await bhttp::async_write(*conn, up, kTuple);
    if (!wec) {
      // Watch the client while the replica works: a client that closes cancels the exchange.
      break;
    }
    if (!(reused && tries == 0)) {
      result.error_kind = wec == beast::error::timeout ? "timeout" : "closed";
      result.kind = Attempt::kRetryable;
      co_return result;
    }
  }

  // The client watcher: reads from the client while the exchange runs (bytes of a next request
  // go into its buffer); an end of stream or error closes the upstream connection.
  bool client_gone = false, watching = true, watcher_running = true;
  net::steady_timer watcher_done(ex, Clock::time_point::max());
  beast::tcp_stream* upstream = conn.get();
  net::co_spawn(
      ex,
      [&]() -> net::awaitable<void> {
        while (watching && buffer.size() < (64u << 10)) {
          auto [ec, n] = co_await client.async_read_some(buffer.prepare(4096), kTuple);
          buffer.commit(n);  // bytes of a next request, kept for it
          if (ec == net::error::operation_aborted || !watching) break;
          if (ec) {
            client_gone = true;
            beast::error_code ignored;
            upstream->socket().close(ignored);
            break;
          }
        }
        watcher_running = false;
        watcher_done.cancel();
        co_return;
      },
      net::detached);
  auto stop_watching = [&]() -> net::awaitable<void> {
    watching = false;
    beast::error_code ignored;
    client.socket().cancel(ignored);
    if (watcher_running) co_await watcher_done.async_wait(kTuple);
  };

  parser.body_limit(boost::none);
  if (x.req.method() == bhttp::verb::head) parser.skip(true);  // a HEAD answer has no body
  auto [hec, hn] = co_await bhttp::async_read_header(*conn, ubuf, parser, kTuple);
  if (hec) {
    co_await stop_watching();
    if (client_gone) {
      result.kind = Attempt::kClientGone;
      co_return result;
    }
    result.error_kind = hec == beast::error::timeout ? "timeout" : "closed";
    result.kind = Attempt::kRetryable;
    // An idle connection the replica closed in the meantime (servers close idle keep-alive
    // connections): the write went through, the answer never comes. Not the replica's failure;
    // its other idle connections are likely as old.
    result.stale = reused && ubuf.size() == 0 && hec != beast::error::timeout;
    if (result.stale) {
      MutexLock lock(idle_mu);
      idle[backend].clear();
    }
    co_return result;
  }
  result.status = static_cast<int>(parser.get().result_int());
  result.content_type = std::string(parser.get()[bhttp::field::content_type]);
  result.retry_after = std::string(parser.get()[bhttp::field::retry_after]);
  const bool ok = result.status / 100 == 2;
  const bool relay_stream = ok && x.stream;
  std::array<char, 16384> piece;
  std::string collected;
  std::string events;  // a stream's bytes not yet relayed: at most one incomplete event
  bool failed = false;
  bool client_write_failed = false;
  if (relay_stream) {
    std::string h = fmt::format(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n{}"
        "X-Sluice-Replica: {}\r\n\r\n",
        result.status, reason(result.status), result.content_type.empty() ? "text/event-stream" : result.content_type,
        x.keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n", b.name);
    client_write_failed = static_cast<bool>(co_await write_client(client, h, ms(config.idle_timeout_seconds)));
  }
  while (!parser.is_done() && !client_write_failed) {
    parser.get().body().data = piece.data();
    parser.get().body().size = piece.size();
    auto [ec, n] = co_await bhttp::async_read_some(*conn, ubuf, parser, kTuple);
    if (ec == bhttp::error::need_buffer) ec = {};
    const size_t got = piece.size() - parser.get().body().size;
    if (got > 0) {
      if (relay_stream) {
        if (ttft < 0) ttft = std::chrono::duration<double>(Clock::now() - started).count();
        // Whole events are relayed as they complete; a usage chunk is read (and dropped if the
        // router asked for it).
        events.append(piece.data(), got);
        std::string out;
        size_t at = 0;
        for (size_t end; (end = events.find("\n\n", at)) != std::string::npos; at = end + 2) {
          const std::string_view event(events.data() + at, end + 2 - at);
          if (event.starts_with("data: {") && event.find("\"usage\"") != std::string_view::npos) {
            auto j = parse_json(event.substr(6));
            int64_t prompt = 0, cached = 0;
            if (j && read_usage(*j, prompt, cached)) {
              x.prompt_tokens = prompt, x.cached_tokens = cached;
              const bool usage_only = j->contains("choices") && (*j)["choices"].is_array() && (*j)["choices"].empty();
              if (x.strip_usage && usage_only) continue;
            }
          }
          out.append(event);
        }
        events.erase(0, at);
        if (events.size() > (1u << 20)) out += std::exchange(events, {});  // not SSE: relayed as it is
        if (!out.empty()) {
          std::string chunk = fmt::format("{:x}\r\n", out.size());
          chunk += out;
          chunk += "\r\n";
          client_write_failed = static_cast<bool>(co_await write_client(client, chunk, ms(config.idle_timeout_seconds)));
        }
      } else if (collected.size() + got > (64u << 20)) {
        failed = true;
        result.error_kind = "protocol";
        break;
      } else {
        collected.append(piece.data(), got);
      }
    }
    if (ec) {
      failed = true;
      result.error_kind = ec == beast::error::timeout ? "timeout" : "closed";
      break;
    }
  }
  co_await stop_watching();
  if (client_gone || client_write_failed) {
    result.kind = Attempt::kClientGone;
    co_return result;  // the upstream connection closes with `conn`
  }
  if (relay_stream) {
    std::string tail;
    if (!events.empty()) tail = fmt::format("{:x}\r\n{}\r\n", events.size(), events);  // an unfinished last event
    if (failed) {
      // The stream started: end it with an error event rather than retry or hang.
      with_metrics([](Metrics& m) { ++m.stream_errors; });
      const bool chat = x.req.target().find("chat") != std::string_view::npos;
      Json choice = {{"index", 0}, {"finish_reason", "error"}};
      choice[chat ? "delta" : "text"] = chat ? Json::object() : Json("");
      const std::string event =
          "data: " +
          Json{{"object", chat ? "chat.completion.chunk" : "text_completion"},
               {"choices", Json::array({choice})},
               {"error", {{"message", fmt::format("the replica failed mid-stream ({})", result.error_kind)},
                          {"type", "server_error"}}}}
              .dump() +
          "\n\ndata: [DONE]\n\n";
      tail += fmt::format("{:x}\r\n{}\r\n", event.size(), event);
    }
    tail += "0\r\n\r\n";
    // The replica's share is done before the client sees the end, so the client's next request
    // finds the load as it is (a session would spill from its own replica otherwise).
    pool.end(backend, failed ? Outcome::kFailure : Outcome::kSuccess);
    result.released = true;
    const beast::error_code ec = co_await write_client(client, tail, ms(config.idle_timeout_seconds));
    result.kind = ec ? Attempt::kClientGone : Attempt::kRelayed;
    result.keep_alive = !failed;
    if (!failed && parser.keep_alive()) give_idle(backend, std::move(conn));
    co_return result;
  }
  if (failed) {
    result.status = 0;
    result.kind = Attempt::kRetryable;
    co_return result;
  }
  if (parser.keep_alive()) give_idle(backend, std::move(conn));
  result.body = std::move(collected);
  if (ok) {
    if (auto j = parse_json(result.body)) read_usage(*j, x.prompt_tokens, x.cached_tokens);
  }
  double retry_after = 0;
  if (!result.retry_after.empty()) retry_after = std::atof(result.retry_after.c_str());
  const bool retryable = result.status == 502 || result.status == 503 || result.status == 504 ||
                         (result.status == 429 && retry_after <= config.max_retry_after_seconds);
  if (retryable) {
    result.kind = Attempt::kRetryable;
    co_return result;
  }
  Headers extra;
  extra.emplace_back("X-Sluice-Replica", b.name);
  if (!result.retry_after.empty()) extra.emplace_back("Retry-After", result.retry_after);
  const std::string type = result.content_type.empty() ? "application/json" : result.content_type;
  pool.end(backend, outcome_of(result.status));  // before the client sees the answer (as above)
  result.released = true;
  const bool keep = co_await respond(client, result.status, result.body, x.keep_alive, type, &extra);
  result.kind = Attempt::kRelayed;
  result.keep_alive = keep;
  co_return result;
}

net::awaitable<http::HttpResult<http::HttpResponse>> Router::Impl::get(int backend, std::string path) {
  const BackendConfig& b = pool.config(backend);
  http::HttpOptions o;
  o.connect_timeout = ms(std::min(config.connect_timeout_seconds, config.health_timeout_seconds));
  o.request_timeout = ms(config.health_timeout_seconds);
  http::HttpConnection c(co_await net::this_coro::executor, b.url, o);
  http::HttpRequest r;
  r.target = b.url.target(path);
  if (!b.api_key.empty()) r.headers.push_back({"Authorization", "Bearer " + b.api_key});
  co_return co_await c.request(r);
}

net::awaitable<void> Router::Impl::health_loop(int backend) {
  auto ex = co_await net::this_coro::executor;
  while (!stopping) {
    auto got = co_await get(backend, "/health");
    // A server without the route (404) is alive all the same; a 5xx (draining) or no answer is not.
    const bool passed = got.has_value() || (got.error().kind == http::ErrorKind::kStatus && got.error().status == 404);
    pool.health_check(backend, passed);
    net::steady_timer t(ex, ms(config.health_interval_seconds));
    co_await t.async_wait(kTuple);
  }
}

net::awaitable<void> Router::Impl::scrape_loop(int backend) {
  auto ex = co_await net::this_coro::executor;
  while (!stopping) {
    if (auto got = co_await get(backend, "/metrics")) {
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
      pool.set_reported_load(backend, static_cast<int64_t>(waiting), kv);
    }
    net::steady_timer t(ex, ms(config.metrics_interval_seconds));
    co_await t.async_wait(kTuple);
  }
}

Result<std::unique_ptr<Router>> Router::create(RouterConfig config) {
  if (config.backends.empty()) return Error(StatusCode::kInvalid, "no backend: give --backend URL (or --backends-file FILE)");
  for (size_t i = 0; i < config.backends.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (config.backends[i].name == config.backends[j].name) {
        return Error(StatusCode::kInvalid, "backend {} is given twice", config.backends[i].name);
      }
    }
  }
  if (config.threads < 1) return Error(StatusCode::kInvalid, "threads must be >= 1, got {}", config.threads);
  if (!(config.policy_options.load_factor >= 1.0)) {
    return Error(StatusCode::kInvalid, "the load factor must be >= 1, got {}", config.policy_options.load_factor);
  }
  auto impl = std::make_unique<Impl>(std::move(config));
  auto policy = make_policy(impl->config.policy, impl->config.backends, impl->config.policy_options);
  if (!policy) return Error(policy.error());
  impl->policy = std::move(*policy);
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
}

uint16_t Router::port() const { return impl_->port; }
const BackendPool& Router::backends() const { return impl_->pool; }

void Router::start() {
  Impl& s = *impl_;
  net::co_spawn(s.ioc, s.accept_loop(), net::detached);
  for (size_t b = 0; b < s.pool.size(); ++b) {
    net::co_spawn(net::make_strand(s.ioc), s.health_loop(static_cast<int>(b)), net::detached);
    if (s.config.metrics_interval_seconds > 0) {
      net::co_spawn(net::make_strand(s.ioc), s.scrape_loop(static_cast<int>(b)), net::detached);
    }
  }
  s.signals.async_wait([this](const beast::error_code& ec, int) {
    if (!ec) request_shutdown();
  });
  for (int i = 0; i < s.config.threads; ++i) s.threads.emplace_back([&s] { s.ioc.run(); });
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
  });
}

void Router::run_until_shutdown() {
  for (std::thread& t : impl_->threads) t.join();
  impl_->threads.clear();
}

}  // namespace sluice::router
