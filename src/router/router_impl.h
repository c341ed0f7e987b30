// What the router's files share (router.cc: listening, connections, its own routes, starting and
// stopping; router_proxy.cc: relaying a request to a replica, router_relay.cc the pieces of that
// which hold no routing state; router_health.cc: health checks and scrapes of the replicas'
// /metrics; router_admin.cc: the admin API and changes of membership; router_discovery.cc: DNS
// discovery; router_metrics.cc: its own /metrics). Not part of its interface.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include "common/http_client.h"
#include "common/json.h"
#include "common/mutex.h"
#include "router/hot_prefixes.h"
#include "router/rollout_analysis.h"
#include "router/rollout_store.h"
#include "router/router.h"
#include "router/shadow_store.h"

namespace sluice::router {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using Json = nlohmann::ordered_json;
inline constexpr auto kTuple = net::as_tuple(net::use_awaitable);
using Headers = std::vector<std::pair<std::string, std::string>>;

// Seconds since the epoch: the time the rollout and shadow stores keep.
inline double epoch_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

inline std::chrono::milliseconds ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
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
  std::map<std::string, Usage> group_usage;  // per usage group (router.h)
  // The group names taken, each when its first request arrives (its usage comes with its answer),
  // so concurrent requests with new names cannot take more than max_usage_groups between them.
  std::set<std::string> usage_groups;
  std::map<std::string, std::pair<int64_t, int64_t>> resolutions;  // per discovered name: (ok, failed)
  // Shadow traffic: compared pairs per (arm, "agree"|"disagree"|"shadow_error"), copies dropped
  // per reason ("overflow", "no_replica", "primary_failed").
  std::map<std::pair<std::string, std::string>, int64_t> shadow_pairs;
  std::map<std::string, int64_t> shadow_dropped;
};

struct ShadowExchange;  // router_shadow.cc

// What a client asked for, as the router relays it.
struct Exchange {
  bhttp::request<bhttp::string_body>& req;
  // The routing hints (policy.h): owned here, and seen by the policies through route().
  std::string session_key, prompt;
  RouteRequest route() const { return {session_key, prompt}; }
  std::string group;       // the usage group (router.h)
  std::string model;       // the body's "model", "" when it names none
  bool stream = false;
  bool keep_alive = true;  // the client's connection may serve another request after this one
  bool fresh = false;      // connect anew rather than reuse an idle connection
  std::string body;        // as sent upstream (a stream asks for usage)
  bool strip_usage = false;  // the usage chunk was the router's request: not relayed
  int64_t prompt_tokens = -1, cached_tokens = 0;  // from the answer's usage, when it had one
  int64_t completion_tokens = -1;
  bool stream_failed = false;  // a relayed stream ended by an upstream failure
  // Shadow traffic (router_shadow.cc): the request's copies, sent once it is first written to a
  // replica, and the primary's answer as relayed (a stream's events) for their comparison.
  const Json* parsed_body = nullptr;
  bool shadows_started = false;
  std::vector<std::shared_ptr<ShadowExchange>> shadows;
  bool capture = false, capture_overflow = false;
  std::string captured;
};

inline constexpr size_t kMaxCapturedStream = 4u << 20;

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
  std::string allow;                          // relayed with a 405, as the replica sent it
  std::vector<std::string> www_authenticate;  // relayed with a 401: every challenge the replica sent
  std::string replica;            // the replica's name, for an answer held back and relayed later
  std::string error_kind;         // "connect", "closed", "timeout", "protocol": no answer
  bool keep_alive = true;         // the client connection may serve another request
  bool released = false;          // the replica's in-flight count was already given back
  bool stale = false;             // a reused idle connection the replica had closed: not its failure
};

// The request as replica `b` gets it: hop-by-hop headers dropped, the replica's key set.
bhttp::request<bhttp::string_body> upstream_request(const BackendConfig& b, const Exchange& x);

// A Retry-After value in seconds: delay-seconds or an HTTP-date (RFC 9110 10.2.3), from now;
// infinity for one that is neither (relayed, not waited for).
double retry_after_seconds(std::string_view value);

// What went wrong reading a replica's answer: "timeout"; "protocol" where the bytes that came are
// not HTTP (a malformed status line, header or Content-Length, a bad chunk); else "closed".
std::string read_error_kind(const beast::error_code& ec);

// A write to the client that takes longer than `limit` (a client that stopped reading, its
// socket buffer full) closes its connection, which fails the write: the request is then cancelled
// upstream. (The connection's stream has no write timeout of its own here: it would also end the
// watcher's read, which waits as long as the answer takes.)
net::awaitable<beast::error_code> write_client(beast::tcp_stream& client, std::string_view bytes,
                                               std::chrono::milliseconds limit);

// Reads from the client while a replica works on its request, from construction to stop():
// bytes of a next request go into `buffer`; an end of stream or an error marks the client gone
// and closes the upstream connection, which ends the exchange.
class ClientWatcher {
 public:
  ClientWatcher(const net::any_io_executor& ex, beast::tcp_stream& client, beast::flat_buffer& buffer,
                beast::tcp_stream& upstream);
  ClientWatcher(const ClientWatcher&) = delete;
  ClientWatcher& operator=(const ClientWatcher&) = delete;
  // Stops reading and waits for the reader to finish. REQUIRES: called before destruction.
  net::awaitable<void> stop();
  bool client_gone() const { return gone_; }

 private:
  beast::tcp_stream& client_;
  beast::flat_buffer& buffer_;
  beast::tcp_stream& upstream_;
  bool gone_ = false, watching_ = true, running_ = true;
  net::steady_timer done_;
};

// A replica's event stream as the client gets it: whole events as they complete, the usage chunk
// taken out again where only the router asked for it (Exchange::strip_usage), the usage read into
// the exchange, the events captured for shadow comparison.
class StreamRelay {
 public:
  explicit StreamRelay(Exchange& x) : x_(x) {}
  // What to relay once `piece` has arrived; an answer that is not SSE goes as it is past 1 MiB.
  std::string take(std::string_view piece);
  // What is left once the stream ended: the events a last CR ends (it could not be told from
  // half of a CRLF before), then an unfinished last event as it came.
  std::string finish();
  // The event that ends a stream the replica broke off, with the id, created and model of the
  // chunks before it.
  std::string error_event(std::string_view error_kind) const;

 private:
  std::string relay(bool final);  // the whole events in events_, as relayed
  void capture(const std::string& out);  // for the shadow comparison (Exchange::capture)
  Exchange& x_;
  std::string events_;  // bytes not yet relayed: at most one incomplete event
  Json head_;           // the first chunk's id, created, model, system_fingerprint
};

// One attempt's connection to its replica, the replica as it was when chosen (the admin API or
// discovery may remove it meanwhile).
struct Upstream {
  Upstream(int backend_, uint64_t generation_, std::shared_ptr<const BackendConfig> config_)
      : backend(backend_), generation(generation_), config(std::move(config_)) {}
  int backend;
  uint64_t generation;
  std::shared_ptr<const BackendConfig> config;
  Clock::time_point started = Clock::now();
  std::unique_ptr<beast::tcp_stream> conn;
  bool reused = false;  // an idle connection, not one opened for this attempt
  bhttp::response_parser<bhttp::buffer_body> parser;
  beast::flat_buffer buf;
};

// A relayed answer's outcome for the replica's health: 5xx is failure, 429 load.
inline Outcome outcome_of(int status) {
  if (status == 429) return Outcome::kOverloaded;
  return status >= 500 ? Outcome::kFailure : Outcome::kSuccess;
}

struct Router::Impl {
  explicit Impl(RouterConfig c)
      : config(std::move(c)), pool(config.backends, config.health), idle(config.backends.size()) {
    // A replica going down, coming back or ejected is in the log, as the rollout's decisions are.
    pool.set_on_event([](const std::string& event) { fmt::print(stderr, "sluice route: {}\n", event); });
  }

  // Membership changes, one at a time (the admin API, DNS discovery): the pool, idle
  // connections, the policy's ring and the slot's health checks move together.
  Result<int> add_backend(BackendConfig backend, bool ramp);
  // `only`: remove it only if it came from there (discovery never removes what the admin API added).
  Status remove_backend(std::string_view name, std::optional<Source> only = {});
  Status set_weight(std::string_view name, double weight);
  Mutex membership_mu;
  // Held from the snapshot of the replicas' load to the chosen one's begin() (router_proxy.cc),
  // and while a slot is given to a new replica (add_backend).
  Mutex route_mu;
  // The model ids each replica lists in /v1/models, by slot, with the slot's generation (asked at
  // the first health check and every tenth): a request naming a model goes to those that list
  // it (choose()). A slot not in it: not known yet.
  std::map<int, std::pair<uint64_t, std::vector<std::string>>> served_models SLUICE_GUARDED_BY(route_mu);

  RouterConfig config;
  BackendPool pool;
  std::unique_ptr<Policy> policy;
  // Declared before the io_contexts, so they outlive them: the request frames ~Router leaves
  // on `ioc` are destroyed with it, and their guards count down and report to the shadow.
  std::atomic<int64_t> in_flight{0}, retries_in_flight{0};
  std::atomic<bool> torn_down{false};  // ~Router has joined every thread: nothing runs the io_contexts
  net::io_context ioc;
  tcp::acceptor acceptor{ioc};
  net::signal_set signals{ioc, SIGINT, SIGTERM};
  std::vector<std::thread> threads;
  std::thread drainer;  // request_shutdown(): stops the io_context once in-flight requests are done
  std::atomic<bool> stopping{false};
  uint16_t port = 0;

  // Idle keep-alive connections to each slot's replica, reused by later requests.
  struct IdleConnection {
    uint64_t generation;
    std::unique_ptr<beast::tcp_stream> stream;
  };
  Mutex idle_mu;
  std::vector<std::vector<IdleConnection>> idle SLUICE_GUARDED_BY(idle_mu);

  mutable Mutex metrics_mu;
  Metrics metrics SLUICE_GUARDED_BY(metrics_mu);

  Mutex rng_mu;
  std::mt19937_64 rng SLUICE_GUARDED_BY(rng_mu){std::random_device{}()};

  // Canary rollouts (router_rollout.cc; the admin routes: router_rollout_admin.cc), with config.rollout_db.
  std::unique_ptr<RolloutStore> rollout_store;
  // Held by whoever writes the store (write_rollout_store, a rollout's start): one writer at a
  // time, and never while rollout_mu is held, which every routed request takes: a slow disk
  // or a locked database file delays the store, not the traffic.
  Mutex rollout_store_mu SLUICE_ACQUIRED_BEFORE(rollout_mu);
  mutable Mutex rollout_mu;
  std::optional<Rollout> rollout SLUICE_GUARDED_BY(rollout_mu);  // the latest, finished or not
  int64_t rollout_id SLUICE_GUARDED_BY(rollout_mu) = 0;
  std::string rollout_saved SLUICE_GUARDED_BY(rollout_mu);  // the state last written to the store
  // Decisions and analyses not yet in the store, by rollout id: queued under rollout_mu, written
  // by write_rollout_store in order; those the store refuses (a locked or full disk) stay for
  // the next try, so the history has no gap once it takes writes again.
  std::vector<std::pair<int64_t, RolloutDecision>> unrecorded_decisions SLUICE_GUARDED_BY(rollout_mu);
  std::vector<std::pair<int64_t, StoredAnalysis>> unrecorded_analyses SLUICE_GUARDED_BY(rollout_mu);
  bool rollout_store_failing SLUICE_GUARDED_BY(rollout_mu) = false;  // said once, not at every retry
  // Writes what is queued and the current rollout's state if it changed since last written.
  void write_rollout_store() SLUICE_EXCLUDES(rollout_mu, rollout_store_mu);
  // The store's writer thread: the loop's steps, analyses and evals, and the end of a warming,
  // are written there, so that no I/O thread waits for the disk (a locked database file takes
  // up to its busy timeout, a write an fsync). An admin action writes before it answers (a 200
  // for an abort means the abort is stored); ~Router writes once more after the last thread.
  std::thread rollout_writer;
  Mutex rollout_writer_mu;
  CondVar rollout_writer_cv;
  bool rollout_write_wanted SLUICE_GUARDED_BY(rollout_writer_mu) = false;
  bool rollout_writer_stop SLUICE_GUARDED_BY(rollout_writer_mu) = false;
  void want_rollout_write() SLUICE_EXCLUDES(rollout_writer_mu);
  void rollout_writer_loop() SLUICE_EXCLUDES(rollout_writer_mu, rollout_mu, rollout_store_mu);
  void stop_rollout_writer() SLUICE_EXCLUDES(rollout_writer_mu, rollout_mu, rollout_store_mu);
  // The analysis window: what each version did since the last analysis.
  VersionWindow stable_window SLUICE_GUARDED_BY(rollout_mu), candidate_window SLUICE_GUARDED_BY(rollout_mu);
  double last_analysis SLUICE_GUARDED_BY(rollout_mu) = 0;
  // A request routed to `version` by the rollout ended so.
  void record_outcome(const std::string& version, const RequestOutcome& outcome);
  void analyze_rollout(double now) SLUICE_REQUIRES(rollout_mu);
  Status open_rollouts();
  // The version a request of this session goes to ("" when no rollout is loaded), and the
  // rollout's other version, which takes it while its own has no replica.
  struct RouteVersions {
    std::string assigned, other;
    bool held = false;  // routed while the rollout was held: its outcome is evidence of neither
  };
  RouteVersions route_version(std::string_view session_key);
  // Logs the decisions and queues them for the store; the caller then calls write_rollout_store
  // (an admin action) or want_rollout_write once it has let go of rollout_mu.
  void persist_rollout(const std::vector<RolloutDecision>& decisions) SLUICE_REQUIRES(rollout_mu);
  net::awaitable<void> rollout_loop();
  // The prompt prefixes the traffic shares most; a rollout warms its candidate with them
  // before its first step, while `warming` holds the steps back.
  HotPrefixes hot_prefixes;
  bool warming SLUICE_GUARDED_BY(rollout_mu) = false;
  // A rollout's eval suite runs on a thread of its own (it blocks), one at a time.
  std::thread eval_thread;
  bool eval_running SLUICE_GUARDED_BY(rollout_mu) = false;
  double last_eval SLUICE_GUARDED_BY(rollout_mu) = 0;
  void start_eval(double now) SLUICE_REQUIRES(rollout_mu);
  net::awaitable<void> warm_candidate(std::vector<HotPrefixes::Hot> hot, std::string version, double timeout_seconds,
                                      int64_t id);
  net::awaitable<void> follow_loop();
  // The current rollout with its decisions (and analyses), as GET /admin/rollouts has it; null if none.
  Json current_rollout_json(bool with_analyses) SLUICE_EXCLUDES(rollout_mu, rollout_store_mu);
  net::awaitable<bool> admin_rollouts(beast::tcp_stream& client, bhttp::request<bhttp::string_body>& req,
                                      std::string_view path, bool keep);

  // Shadow traffic (router_shadow.cc): copies of requests to another version, compared with the
  // primary's answers and never returned. They run on a thread of their own (shadow_ioc), so
  // neither a slow shadow replica nor the comparisons and their store hold up a primary.
  std::unique_ptr<ShadowStore> shadow_store;
  Mutex shadow_mu;
  ShadowConfig shadow_config SLUICE_GUARDED_BY(shadow_mu);  // the flags', or POST /admin/shadow's
  ShadowWindow shadow_window SLUICE_GUARDED_BY(rollout_mu);  // a rollout's analysis window
  std::atomic<int64_t> shadow_in_flight{0};
  std::atomic<uint64_t> shadow_next{0};
  net::io_context shadow_ioc;
  net::executor_work_guard<net::io_context::executor_type> shadow_work{shadow_ioc.get_executor()};
  std::thread shadow_thread;
  Status open_shadow();
  // A running rollout's shadow (to its candidate) when it has one, else the configured one.
  std::optional<ShadowConfig> active_shadow(bool* from_rollout = nullptr);
  // The primary was written to `backend`: the copies it gets are planned and sent.
  void start_shadows(Exchange& x, int backend);
  // The primary's answer (status 0: none reached the client) for its copies' comparison.
  void finish_primary(Exchange& x, int status, const std::string& body);
  net::awaitable<void> run_shadow(std::shared_ptr<ShadowExchange> s);
  void complete_shadow(ShadowExchange& s);
  Json shadow_status();  // GET /admin/shadow
  // GET /admin/shadow/report's answer; null with `error` set when the store failed.
  Json shadow_report(const ShadowReportOptions& options, std::string* error = nullptr);
  // The same, computed on the shadow thread: reading the store never holds up an I/O thread.
  // REQUIRES: the caller runs on a strand (every connection's coroutine does, serve()).
  net::awaitable<Json> shadow_report_off_thread(ShadowReportOptions options, std::string* error = nullptr);
  net::awaitable<bool> admin_shadow(beast::tcp_stream& client, bhttp::request<bhttp::string_body>& req,
                                    std::string_view path, bool keep);

  // What the request's header alone refuses (no Host in HTTP/1.1, a transfer coding other than
  // chunked, an API route without the API key), answered before its body is read.
  struct Refusal {
    int status;
    std::string body;
    Headers headers;
  };
  std::optional<Refusal> refuse_before_body(const bhttp::request<bhttp::string_body>& req);
  net::awaitable<void> accept_loop();
  net::awaitable<void> serve(tcp::socket socket);
  net::awaitable<bool> handle(beast::tcp_stream& client, beast::flat_buffer& buffer,
                              bhttp::request<bhttp::string_body>& req);
  net::awaitable<bool> proxy(beast::tcp_stream& client, beast::flat_buffer& buffer,
                             bhttp::request<bhttp::string_body>& req);
  // The exchange a request makes (routing hints, the body as sent upstream).
  Exchange exchange_for(bhttp::request<bhttp::string_body>& req, const Json& body, bool keep);
  // The replica for try `tried.size()`, begun (its in-flight count taken) with its generation in
  // `generation`; backend -1 when none is left.
  Decision choose(const Exchange& x, const std::vector<int>& tried, const RouteVersions& versions,
                  const std::string& shadow_only, uint64_t& generation);
  // A request relayed or given up by its client: usage, metrics, the rollout's outcome. `name`:
  // the replica's as chosen (its slot may hold another by now).
  void record_answered(Exchange& x, const Decision& d, const std::string& name, const Attempt& last,
                       const RouteVersions& versions, bool present, double seconds, double attempt_seconds,
                       double ttft);
  net::awaitable<Attempt> attempt(int backend, beast::tcp_stream& client, beast::flat_buffer& buffer, Exchange& x,
                                  double& ttft);
  // Connects (or takes an idle connection) and writes the request; false with `result` set when
  // that failed.
  net::awaitable<bool> send(Upstream& u, bhttp::request<bhttp::string_body>& up, Exchange& x, Attempt& result);
  // The rest of an attempt once the answer's header is in: a 2xx stream relayed event by event,
  // anything else read whole and then relayed or held back for a retry.
  net::awaitable<Attempt> relay_stream(Upstream& u, beast::tcp_stream& client, ClientWatcher& watcher, Exchange& x,
                                       Attempt result, double& ttft);
  net::awaitable<Attempt> relay_whole(Upstream& u, beast::tcp_stream& client, ClientWatcher& watcher, Exchange& x,
                                      Attempt result);
  net::awaitable<bool> admin(beast::tcp_stream& client, bhttp::request<bhttp::string_body>& req, std::string_view path);
  Json replicas_json();  // GET /admin/replicas' list
  // GET /ui: the dashboard (dashboard.h), for the admin key as a bearer token or as the password
  // of HTTP Basic authentication (what a browser asks for).
  net::awaitable<bool> dashboard(beast::tcp_stream& client, bhttp::request<bhttp::string_body>& req);
  net::awaitable<Json> models();
  // GET `path` of a replica on a connection of its own, with the health timeout.
  net::awaitable<http::HttpResult<http::HttpResponse>> get(int backend, std::string path);
  // Both stop once the slot's generation moves on (its replica removed).
  net::awaitable<void> health_loop(int backend, uint64_t generation);
  net::awaitable<void> scrape_loop(int backend, uint64_t generation);
  void start_checks(int backend);
  net::awaitable<void> discovery_loop(DiscoveryConfig discovery);
  // The usage group of a request (router.h), bounded to config.max_usage_groups names.
  std::string usage_group(std::string_view header_value, bool has_session);
  // Replicas available that answer clients: not those of a shadow version in force without a
  // rollout (they only get copies).
  int num_answering();
  // Which replicas answer clients: with a rollout loaded, its two versions' only (choose()
  // sends none elsewhere); without, all but a shadow version's in force (they only get copies).
  struct ClientVersions {
    std::vector<std::string> only;  // empty: any
    std::string except;             // "": none
    bool admits(const std::string& version) const {
      return (only.empty() || std::ranges::find(only, version) != only.end()) && (except.empty() || version != except);
    }
  };
  ClientVersions client_versions();
  // Keeps the model ids a /v1/models answer lists for the slot (served_models).
  void learn_models(int backend, uint64_t generation, std::string_view body);

  // A connection is kept with the generation of the slot it was opened for: one to a replica
  // since removed is never handed to the slot's next replica.
  std::unique_ptr<beast::tcp_stream> take_idle(int backend, uint64_t generation) {
    MutexLock lock(idle_mu);
    if (static_cast<size_t>(backend) >= idle.size()) return nullptr;
    auto& conns = idle[backend];
    while (!conns.empty()) {
      IdleConnection c = std::move(conns.back());
      conns.pop_back();
      if (c.generation == generation) return std::move(c.stream);
    }
    return nullptr;
  }
  void give_idle(int backend, uint64_t generation, std::unique_ptr<beast::tcp_stream> s) {
    MutexLock lock(idle_mu);
    if (static_cast<size_t>(backend) >= idle.size()) idle.resize(backend + 1);
    if (idle[backend].size() < 64) idle[backend].push_back({generation, std::move(s)});
  }
  // A new slot, or one whose replica is gone.
  void clear_idle(int backend) {
    MutexLock lock(idle_mu);
    if (static_cast<size_t>(backend) >= idle.size()) idle.resize(backend + 1);
    idle[backend].clear();
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

// An error body in OpenAI's shape.
std::string error_body(std::string_view message, std::string_view type, std::string_view code = {});
// What is wrong with an admin request's body as parsed: "" for a JSON object; else where the
// JSON breaks ("the body is not JSON: ... at byte 12") or what it is instead of an object.
std::string body_problem(const std::expected<Json, JsonError>& parsed);
// "OK", "Bad Gateway", ...
std::string_view reason(int status);
// A whole answer with Content-Length; true when the connection may serve another request.
// NOTE: g++ 12 destroys a braced temporary inside a co_await expression twice (see
// http_client.h): callers build bodies and headers first, and pass headers by pointer.
// `head_only`: the headers alone (the answer to HEAD), Content-Length the body's.
net::awaitable<bool> respond(beast::tcp_stream& client, int status, std::string body, bool keep_alive,
                             std::string_view content_type = "application/json", const Headers* extra = nullptr,
                             bool head_only = false);
// respond() to `req`: the headers alone when it is HEAD (the body would be read as the next answer).
inline net::awaitable<bool> reply(const bhttp::request<bhttp::string_body>& req, beast::tcp_stream& client, int status,
                                  std::string body, bool keep_alive, std::string_view content_type = "application/json",
                                  const Headers* extra = nullptr) {
  return respond(client, status, std::move(body), keep_alive, content_type, extra, req.method() == bhttp::verb::head);
}
// The text a prompt starts with, for the prefix index: a completion's prompt (strings of a list
// joined), a chat's messages as role and content in order.
std::string prompt_text(const Json& body);
// usage.prompt_tokens and usage.prompt_tokens_details.cached_tokens of an answer or a chunk.
bool read_usage(const Json& j, int64_t& prompt, int64_t& cached, int64_t* completion = nullptr);
// The router's /metrics, in the Prometheus text format, every name prefixed sluice_router_.
std::string metrics_of(const Router::Impl& s);

// Whether the configuration names every replica's version: each static one labelled and none
// discovered (a learned or discovered version is not known at start).
inline bool versions_known(const RouterConfig& c) {
  return c.discover.empty() && std::ranges::none_of(c.backends, [](const BackendConfig& b) { return b.version.empty(); });
}

}  // namespace sluice::router
