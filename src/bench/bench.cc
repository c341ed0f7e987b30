#include "bench/bench.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <limits>
#include <unordered_set>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "bench/arrivals.h"
#include "bench/report.h"

namespace sluice::bench {
namespace {

namespace net = boost::asio;
constexpr auto kTuple = net::as_tuple(net::use_awaitable);

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
Clock::duration from_seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// Exceptions are not expected from the coroutines (errors are values); if one escapes anyway
// (out of memory), it leaves io_context::run() and becomes an error of run().
void rethrow(std::exception_ptr e) {
  if (e) std::rethrow_exception(e);
}

// Idle keep-alive connections, shared by warmup and the measured run, so that the measured run
// does not pay for connections warmup has opened.
class ConnectionPool {
 public:
  ConnectionPool(net::any_io_executor executor, http::Url url, http::HttpOptions options)
      : executor_(std::move(executor)), url_(std::move(url)), options_(std::move(options)) {}

  std::unique_ptr<http::HttpConnection> acquire() {
    if (idle_.empty()) return std::make_unique<http::HttpConnection>(executor_, url_, options_);
    auto c = std::move(idle_.back());
    idle_.pop_back();
    return c;
  }
  void release(std::unique_ptr<http::HttpConnection> c) {
    if (c->is_open()) idle_.push_back(std::move(c));
  }

 private:
  net::any_io_executor executor_;
  http::Url url_;
  http::HttpOptions options_;
  std::vector<std::unique_ptr<http::HttpConnection>> idle_;
};

struct PhaseLimits {
  int64_t num_requests = 0;  // 0: none
  double duration_s = 0;     // 0: none
  double drain_timeout_s = 0;
  int32_t concurrency = 1;
  double rate = 0;
  int32_t max_concurrency = 0;
  uint64_t arrival_seed = 0;
  int64_t num_total = -1;  // for progress
  bool warmup = false;
};

// One phase of a run (warmup or measured): starts its senders on the io_context; the caller runs
// the io_context, which returns when the phase has ended. All members are touched only from
// the io_context's one thread.
class Phase {
 public:
  // signals: SIGINT and SIGTERM, registered for the whole run (null: not stopped by them).
  Phase(net::io_context& io, ConnectionPool& pool, const ApiSettings& api, Workload& workload, PhaseLimits limits,
        const ProgressFn& progress, net::signal_set* signals)
      : io_(io), pool_(pool), api_(api), workload_(workload), limits_(limits), progress_(progress), wake_(io),
        ticker_(io), watchdog_(io), arrival_(io), signals_(signals) {
    // The wake timer never expires: waiters are woken by cancel(), which leaves the expiry
    // alone (changing it would cancel the other waiters too).
    wake_.expires_at(Clock::time_point::max());
  }

  void start() {
    start_ = Clock::now();
    if (limits_.duration_s > 0) deadline_ = start_ + from_seconds(limits_.duration_s);
    if (limits_.rate > 0) {
      num_senders_ = 1;
      net::co_spawn(io_, open_loop(), rethrow);
    } else {
      num_senders_ = limits_.concurrency;
      for (int32_t i = 0; i < limits_.concurrency; ++i) net::co_spawn(io_, closed_loop_client(), rethrow);
    }
    if (progress_) net::co_spawn(io_, tick(), rethrow);
    if (limits_.duration_s > 0) net::co_spawn(io_, cancel_after_drain_timeout(), rethrow);
    // A signal that came between phases waits in the set and arrives here at once.
    if (signals_) {
      signals_->async_wait([this](const boost::system::error_code& ec, int signal) {
        if (!ec) interrupt(signal);
      });
    }
  }

  int interrupted_by() const { return interrupted_by_; }
  // Why the phase stopped sending before its limits, when the server went away; else empty.
  const std::string& gave_up() const { return gave_up_; }

  std::vector<RequestRecord> take_records() {
    std::sort(records_.begin(), records_.end(),
              [](const RequestRecord& a, const RequestRecord& b) { return a.request_idx < b.request_idx; });
    return std::move(records_);
  }
  double duration_s() const { return seconds(end_ - start_); }
  Progress progress() const {
    Progress p;
    p.num_done = static_cast<int64_t>(records_.size());
    p.num_total = limits_.num_total;
    p.num_errors = num_errors_;
    p.num_in_flight = num_in_flight_;
    p.output_tokens = output_tokens_;
    p.elapsed_s = seconds((finished_ ? end_ : Clock::now()) - start_);
    p.duration_s = limits_.duration_s;
    p.warmup = limits_.warmup;
    return p;
  }

 private:
  bool may_send(Clock::time_point now) const {
    return interrupted_by_ == 0 && gave_up_.empty() && (limits_.num_requests == 0 || num_sent_ < limits_.num_requests) &&
           (!deadline_ || now < *deadline_) && !workload_.exhausted();
  }

  // A signal: nothing more is sent, and what is in flight is cancelled. The signals go back to
  // their default, so a second one ends the process.
  void interrupt(int signal) {
    interrupted_by_ = signal;
    boost::system::error_code ignored;
    signals_->clear(ignored);
    cancel_in_flight();
    arrival_.cancel();
    wake_.cancel();
    finish_if_done();
  }

  void cancel_in_flight() {
    // Copied first: each cancelled request leaves busy_ when it resumes, later on.
    const std::vector<http::HttpConnection*> busy(busy_.begin(), busy_.end());
    for (http::HttpConnection* c : busy) c->cancel();
  }

  net::awaitable<void> wait_for_change() { co_await wake_.async_wait(kTuple); }

  // A request admitted at `at`, which is its start time: the phase's deadline is checked
  // against the same instant, so no request of a phase starts after its duration.
  struct Admitted {
    RequestSpec spec;
    Clock::time_point at;
  };

  // The next request to send, or none once the phase's limits say stop. Waits while a chat
  // workload has every ready turn taken (one comes back when its answer does).
  net::awaitable<std::optional<Admitted>> admit_next() {
    for (;;) {
      const Clock::time_point now = Clock::now();
      if (!may_send(now)) co_return std::nullopt;
      if (std::optional<RequestSpec> spec = workload_.next()) co_return Admitted{std::move(*spec), now};
      co_await wait_for_change();
    }
  }

  net::awaitable<void> closed_loop_client() {
    while (std::optional<Admitted> next = co_await admit_next()) co_await send(std::move(*next));
    --num_senders_;
    finish_if_done();
  }

  net::awaitable<void> open_loop() {
    PoissonArrivals arrivals(limits_.rate, limits_.arrival_seed);
    double next_at_s = 0;
    while (may_send(Clock::now()) && (limits_.duration_s == 0 || next_at_s < limits_.duration_s)) {
      arrival_.expires_at(start_ + from_seconds(next_at_s));
      co_await arrival_.async_wait(kTuple);
      while (limits_.max_concurrency > 0 && num_in_flight_ >= limits_.max_concurrency && may_send(Clock::now())) {
        co_await wait_for_change();
      }
      std::optional<Admitted> next = co_await admit_next();
      if (!next) break;
      net::co_spawn(io_, send(std::move(*next)), rethrow);
      next_at_s += arrivals.next_gap_s();
    }
    --num_senders_;
    finish_if_done();
  }

  net::awaitable<void> send(Admitted admitted) {
    const RequestSpec& spec = admitted.spec;
    const int64_t request_idx = num_sent_++;
    ++num_in_flight_;
    std::unique_ptr<http::HttpConnection> connection = pool_.acquire();
    busy_.insert(connection.get());
    RequestOutcome outcome = co_await send_request(*connection, api_, spec, start_, admitted.at);
    busy_.erase(connection.get());
    pool_.release(std::move(connection));
    --num_in_flight_;
    outcome.record.request_idx = request_idx;
    workload_.complete(spec, outcome.record.ok ? &outcome.answer : nullptr);
    if (outcome.record.ok) {
      output_tokens_ += outcome.record.output_tokens;
    } else {
      ++num_errors_;
    }
    // A server that refuses every connection is gone: without this, a closed loop would spin
    // through --num-requests (or --duration) at thousands of refused connections a second.
    // Refused: nothing listens (a DNS failure or this side out of sockets is no sign of that).
    const bool refused = outcome.record.error_kind == "connect" &&
                         outcome.record.error.find("Connection refused") != std::string::npos;
    refused_in_a_row_ = refused ? refused_in_a_row_ + 1 : 0;
    if (refused_in_a_row_ == kGiveUpAfterRefused && gave_up_.empty() && may_send(Clock::now())) {
      gave_up_ = fmt::format("the server refused {} connections in a row (the last: {}); stopped sending",
                             kGiveUpAfterRefused, outcome.record.error);
      arrival_.cancel();
    }
    records_.push_back(std::move(outcome.record));
    wake_.cancel();
    finish_if_done();
  }

  net::awaitable<void> tick() {
    while (!finished_) {
      progress_(progress());
      ticker_.expires_after(std::chrono::milliseconds(250));
      co_await ticker_.async_wait(kTuple);
    }
  }

  net::awaitable<void> cancel_after_drain_timeout() {
    if (finished_) co_return;
    watchdog_.expires_at(*deadline_ + from_seconds(limits_.drain_timeout_s));
    auto [ec] = co_await watchdog_.async_wait(kTuple);
    if (ec) co_return;  // the phase ended in time
    cancel_in_flight();
  }

  void finish_if_done() {
    if (finished_ || num_senders_ > 0 || num_in_flight_ > 0) return;
    finished_ = true;
    end_ = Clock::now();
    ticker_.cancel();
    watchdog_.cancel();
    wake_.cancel();
    if (signals_) {
      boost::system::error_code ignored;
      signals_->cancel(ignored);  // registered still: a signal now waits for the next phase, if any
    }
  }

  net::io_context& io_;
  ConnectionPool& pool_;
  const ApiSettings& api_;
  Workload& workload_;
  const PhaseLimits limits_;
  const ProgressFn& progress_;
  net::steady_timer wake_;      // cancelled when a request ends: a slot or a chat turn may be free
  net::steady_timer ticker_;    // progress
  net::steady_timer watchdog_;  // the drain timeout
  net::steady_timer arrival_;   // open loop: the next arrival
  net::signal_set* signals_;    // SIGINT, SIGTERM; null: not stopped by them
  int interrupted_by_ = 0;  // the signal that stopped the phase
  static constexpr int64_t kGiveUpAfterRefused = 32;
  int64_t refused_in_a_row_ = 0;  // requests whose connection was refused, since the last that was not
  std::string gave_up_;
  Clock::time_point start_, end_;
  std::optional<Clock::time_point> deadline_;
  int32_t num_senders_ = 0;  // sending coroutines still running
  int64_t num_sent_ = 0;
  int64_t num_in_flight_ = 0;
  int64_t num_errors_ = 0;
  int64_t output_tokens_ = 0;
  bool finished_ = false;
  std::unordered_set<http::HttpConnection*> busy_;  // connections with a request in flight
  std::vector<RequestRecord> records_;              // in the order they ended
};

Result<std::string> first_model(const http::Url& api_url, const ApiSettings& api, const http::HttpOptions& options) {
  http::HttpRequest request;
  request.target = api_url.target("/models");
  if (!api.api_key.empty()) request.headers.push_back({"Authorization", "Bearer " + api.api_key});
  auto response = http::fetch(api_url, request, options);
  const std::string hint = "pass --model to name the model instead";
  if (!response) return Error("cannot list the server's models: {} ({})", response.error().message, hint);
  auto listed = http::first_listed_model(response->body);
  if (!listed) {
    return Error("GET {} did not list a model (expected {{\"data\": [{{\"id\": ...}}]}}); {}", request.target, hint);
  }
  return listed->id;
}

struct PhaseResult {
  std::vector<RequestRecord> records;
  double duration_s = 0;
  int interrupted_by = 0;
  std::string gave_up;
};

// Runs one phase to its end on `io`.
PhaseResult run_phase(net::io_context& io, ConnectionPool& pool, const ApiSettings& api, Workload& workload,
                      const PhaseLimits& limits, const ProgressFn& progress, net::signal_set* signals) {
  Phase phase(io, pool, api, workload, limits, progress, signals);
  phase.start();
  io.restart();
  io.run();
  if (progress) progress(phase.progress());
  return {phase.take_records(), phase.duration_s(), phase.interrupted_by(), phase.gave_up()};
}

}  // namespace

Status validate(const BenchConfig& c) {
  if (Status s = validate(c.workload); !s) return s;
  if (auto url = http::parse_url(c.url); !url) return url.error();
  auto invalid = [](std::string message) { return Status::error(std::move(message), StatusCode::kInvalid); };
  // Bounds past which a time in nanoseconds (or a Poisson gap of 1/rate) would overflow: a
  // "very long" value would otherwise wrap into "at once" or "already over".
  constexpr double kMaxSeconds = 1e7;  // about 116 days
  auto within = [](double v, double lo, double hi) { return std::isfinite(v) && v >= lo && v <= hi; };
  if (c.rate != 0 && !within(c.rate, 1e-6, 1e6)) {
    return invalid(fmt::format("--rate must be between 1e-06 and 1e+06 requests/s, got {}", c.rate));
  }
  if (!within(c.duration_s, 0, kMaxSeconds)) {
    return invalid(fmt::format("--duration must be between 0 and {:g} s, got {}", kMaxSeconds, c.duration_s));
  }
  if (!within(c.request_timeout_s, 1e-3, kMaxSeconds)) {
    return invalid(fmt::format("--timeout must be between 0.001 and {:g} s, got {}", kMaxSeconds, c.request_timeout_s));
  }
  if (!within(c.drain_timeout_s, 0, kMaxSeconds)) {
    return invalid(fmt::format("--drain-timeout must be between 0 and {:g} s, got {}", kMaxSeconds, c.drain_timeout_s));
  }
  if (!within(c.temperature, 0, 1e6)) {
    return invalid(fmt::format("--temperature must be between 0 and 1e+06, got {}", c.temperature));
  }
  if (c.rate == 0 && c.concurrency < 1) return invalid("--concurrency must be at least 1");
  if (c.max_concurrency < 0) return invalid("--max-concurrency must be 0 (no cap) or more");
  if (c.num_requests < 0 || c.warmup < 0) return invalid("--num-requests and --warmup must not be negative");
  if (c.duration_s < 0) return invalid("--duration must not be negative");
  if (c.request_timeout_s <= 0 || c.drain_timeout_s < 0) return invalid("--timeout must be positive");
  if (c.workload.kind == WorkloadKind::kRandom && c.num_requests == 0 && c.duration_s == 0) {
    return invalid("the random workload never runs out: bound it with --num-requests or --duration");
  }
  if (!c.extra_body.is_object()) return invalid("--extra-body must be a JSON object");
  return Status::ok();
}

Result<BenchReport> run(const BenchConfig& config, const ProgressFn& progress) {
  SLUICE_RETURN_IF_ERROR(validate(config));
  SLUICE_ASSIGN_OR_RETURN(http::Url api_url, http::parse_url(config.url));
  if (api_url.path.empty()) api_url.path = "/v1";
  http::HttpOptions options;
  options.request_timeout = std::chrono::milliseconds(static_cast<int64_t>(config.request_timeout_s * 1000));
  options.user_agent = "sluice-bench";

  BenchReport report;
  report.config = config;
  report.api_url = api_url.to_string();
  ApiSettings api;
  api.url = api_url;
  api.api = config.workload.api;
  api.api_key = config.api_key;
  api.ignore_eos = config.ignore_eos;
  api.temperature = config.temperature;
  api.extra_body = config.extra_body;
  api.model = config.model;
  if (api.model.empty()) {
    SLUICE_ASSIGN_OR_RETURN(api.model, first_model(api_url, api, options));
    report.config.model = api.model;
  }

  std::unique_ptr<Workload> workload = make_workload(config.workload);
  PhaseLimits limits;
  limits.num_requests = config.num_requests;
  limits.duration_s = config.duration_s;
  limits.drain_timeout_s = config.drain_timeout_s;
  limits.concurrency = config.concurrency;
  limits.rate = config.rate;
  limits.max_concurrency = config.max_concurrency;
  limits.arrival_seed = config.workload.seed ^ 0xa5a5a5a5a5a5a5a5ull;  // apart from the workload's draws
  if (limits.num_requests == 0 && limits.duration_s == 0) limits.num_requests = workload->size().value_or(0);
  limits.num_total = limits.num_requests > 0 ? limits.num_requests : -1;
  if (workload->size() && limits.num_requests > *workload->size()) {
    limits.num_total = *workload->size();
    report.workload_size = *workload->size();  // said in the report: fewer than asked for
  }
  report.config.num_requests = limits.num_requests;

  try {
    net::io_context io;
    ConnectionPool pool(io.get_executor(), api_url, options);
    // Registered from here to the end of the run: a signal between the phases is not lost.
    std::optional<net::signal_set> signals;
    if (config.stop_on_signal) signals.emplace(io, SIGINT, SIGTERM);
    net::signal_set* stop = signals ? &*signals : nullptr;
    if (config.warmup > 0) {
      // Random prompts of the same lengths, not the workload's own: warmup must not fill the
      // prefix cache with the prefixes the measured run is about to send.
      WorkloadConfig warm = config.workload;
      warm.kind = WorkloadKind::kRandom;
      warm.seed ^= 0x5a5a5a5a5a5a5a5aull;
      std::unique_ptr<Workload> warm_workload = make_workload(warm);
      PhaseLimits w;
      w.num_requests = w.num_total = config.warmup;
      w.concurrency = std::min<int32_t>(config.warmup, config.rate > 0 ? std::max(1, config.max_concurrency)
                                                                         : config.concurrency);
      w.warmup = true;
      PhaseResult warmed = run_phase(io, pool, api, *warm_workload, w, progress, stop);
      report.interrupted_by = warmed.interrupted_by;
      if (!warmed.gave_up.empty()) report.gave_up = "warmup: " + warmed.gave_up;
    }
    if (report.interrupted_by == 0 && report.gave_up.empty()) {
      PhaseResult measured = run_phase(io, pool, api, *workload, limits, progress, stop);
      report.records = std::move(measured.records);
      report.summary = summarize(report.records, measured.duration_s);
      report.interrupted_by = measured.interrupted_by;
      report.gave_up = measured.gave_up;
    }
  } catch (const std::exception& e) {
    return Error("benchmark failed: {}", e.what());
  }
  return report;
}

}  // namespace sluice::bench
