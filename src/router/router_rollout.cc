// Canary rollouts in the router (router.h, rollout.h): the rollout loaded from its store at start,
// the version each request goes to, the loop that moves the steps on and writes the store, the eval
// thread and the warming of a candidate (the admin routes: router_rollout_admin.cc).
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>

#include "router/router_impl.h"

namespace sluice::router {
namespace {

constexpr auto kRolloutTick = std::chrono::milliseconds(200);

}  // namespace

Status Router::Impl::open_rollouts() {
  if (config.rollout_db.empty()) return Status::ok();
  auto store = RolloutStore::open(config.rollout_db);
  if (!store) return store.error();
  rollout_store = std::move(*store);
  // The latest rollout, finished or not: an aborted one keeps every request on stable, a
  // promoted one on the candidate, as before the restart, until the next one starts.
  auto latest = rollout_store->list(1);
  if (!latest) return latest.error();
  if (latest->empty()) return Status::ok();
  const StoredRollout& stored = latest->front();
  auto restored = Rollout::restore(stored.spec, stored.state);
  if (!restored) return restored.error().with_context(fmt::format("rollout {} in {}", stored.id, config.rollout_db));
  MutexLock lock(rollout_mu);
  rollout = std::move(*restored);
  rollout_id = stored.id;
  rollout_saved = rollout->state().dump();
  std::vector<std::string> versions = {stored.spec.stable, stored.spec.candidate};
  if (rollout->finished()) {
    const bool promoted = rollout->phase() == RolloutPhase::kPromoted;
    versions = {promoted ? stored.spec.candidate : stored.spec.stable};
    fmt::print(stderr, "sluice route: rollout {} '{}' was {}: every request goes to version '{}'\n", stored.id,
               stored.spec.name, phase_name(rollout->phase()), versions[0]);
  } else {
    fmt::print(stderr, "sluice route: resuming rollout {} '{}' ({} -> {}) at step {}, the candidate at {}%{}\n",
               stored.id, stored.spec.name, stored.spec.stable, stored.spec.candidate, rollout->step(),
               rollout->weight(), rollout->phase() == RolloutPhase::kPaused ? ", paused (until resumed)" : "");
  }
  // Its versions' replicas may be gone since: the share of a version with none goes to the
  // other, and the analysis waits for requests it will not get.
  for (const std::string& v : versions) {
    const auto has_v = [&](const BackendConfig& b) { return b.version == v; };
    if (versions_known(config) && std::ranges::none_of(config.backends, has_v)) {
      fmt::print(stderr,
                 "sluice route: warning: no replica has version '{}' of rollout {}: its requests go to the other "
                 "version (and its steps wait) until one joins (admin API)\n",
                 v, stored.id);
    }
  }
  return Status::ok();
}

Router::Impl::RouteVersions Router::Impl::route_version(std::string_view session_key) {
  if (!rollout_store && config.follow_url.empty()) return {};
  // A request without a session key is assigned at random (with the same split).
  std::string key(session_key);
  if (key.empty()) {
    MutexLock lock(rng_mu);
    key = fmt::format("request {}", rng());
  }
  MutexLock lock(rollout_mu);
  if (!rollout) return {};
  const RolloutSpec& spec = rollout->spec();
  if (rollout->phase() == RolloutPhase::kPromoted) return {spec.candidate, spec.stable};
  const bool to_candidate = rollout->routes_to_candidate(key);
  rollout->count_request(to_candidate);
  const bool held = !rollout->held_for().empty();
  if (to_candidate) return {spec.candidate, spec.stable, held};
  return {spec.stable, spec.candidate, held};
}

void Router::Impl::persist_rollout(const std::vector<RolloutDecision>& decisions) {
  for (const RolloutDecision& d : decisions) {
    fmt::print(stderr, "sluice route: rollout {} '{}' step {}: {}: {}\n", rollout_id, rollout->spec().name, d.step,
               d.action, d.reason);
    unrecorded_decisions.emplace_back(rollout_id, d);
  }
}

// A snapshot is taken under rollout_mu, written without it, and what was written is taken off
// the queues under it again. Only this function (one caller at a time: rollout_store_mu) takes
// entries off, and others only append, so the written ones are still at the front.
void Router::Impl::write_rollout_store() {
  if (!rollout_store) return;
  MutexLock store_lock(rollout_store_mu);
  std::vector<std::pair<int64_t, RolloutDecision>> decisions;
  std::vector<std::pair<int64_t, StoredAnalysis>> analyses;
  std::optional<Rollout> current;
  int64_t id = 0;
  std::string state;
  {
    MutexLock lock(rollout_mu);
    decisions = unrecorded_decisions;
    analyses = unrecorded_analyses;
    if (rollout && (state = rollout->state().dump()) != rollout_saved) current = *rollout, id = rollout_id;
  }
  if (decisions.empty() && analyses.empty() && !current) return;
  Status failed = Status::ok();
  size_t num_analyses = 0, num_decisions = 0;
  for (; failed.is_ok() && num_analyses < analyses.size(); ++num_analyses) {
    failed = rollout_store->record_analysis(analyses[num_analyses].first, analyses[num_analyses].second);
    if (!failed.is_ok()) break;
  }
  for (; failed.is_ok() && num_decisions < decisions.size(); ++num_decisions) {
    failed = rollout_store->record(decisions[num_decisions].first, decisions[num_decisions].second);
    if (!failed.is_ok()) break;
  }
  // The state after its decisions: a restart never finds a state without the decisions that made it.
  bool saved = false;
  if (failed.is_ok() && current) {
    failed = rollout_store->save(id, *current, epoch_now());
    saved = failed.is_ok();
  }
  MutexLock lock(rollout_mu);
  unrecorded_analyses.erase(unrecorded_analyses.begin(), unrecorded_analyses.begin() + static_cast<ptrdiff_t>(num_analyses));
  unrecorded_decisions.erase(unrecorded_decisions.begin(), unrecorded_decisions.begin() + static_cast<ptrdiff_t>(num_decisions));
  if (saved && rollout_id == id) rollout_saved = std::move(state);
  if (!failed.is_ok()) {
    if (!rollout_store_failing) {
      fmt::print(stderr, "sluice route: {} (tried again every {} ms; the rollout goes on in memory)\n",
                 failed.message(), kRolloutTick.count());
    }
    rollout_store_failing = true;
    return;
  }
  if (rollout_store_failing) fmt::print(stderr, "sluice route: the rollout store takes writes again; nothing was lost\n");
  rollout_store_failing = false;
}

void Router::Impl::want_rollout_write() {
  MutexLock lock(rollout_writer_mu);
  rollout_write_wanted = true;
  rollout_writer_cv.notify_one();
}

void Router::Impl::rollout_writer_loop() {
  for (bool stop = false; !stop;) {
    {
      MutexLock lock(rollout_writer_mu);
      while (!rollout_write_wanted && !rollout_writer_stop) rollout_writer_cv.wait(lock);
      rollout_write_wanted = false;
      stop = rollout_writer_stop;
    }
    try {
      write_rollout_store();  // the last one after the stop: what the final steps and evals queued
    } catch (const std::exception& e) {  // out of memory, or a bug: logged, the rollout goes on in memory
      fmt::print(stderr, "sluice route: writing the rollout store failed: {}\n", e.what());
    }
  }
}

void Router::Impl::stop_rollout_writer() {
  if (!rollout_writer.joinable()) return;  // never started: nothing ran that queues
  {
    MutexLock lock(rollout_writer_mu);
    rollout_writer_stop = true;
    rollout_writer_cv.notify_one();
  }
  rollout_writer.join();
  // The store refused even the last write (its file still locked): say what it lacks.
  MutexLock lock(rollout_mu);
  const bool state_unsaved = rollout && rollout->state().dump() != rollout_saved;
  if (!unrecorded_decisions.empty() || !unrecorded_analyses.empty() || state_unsaved) {
    std::string end;  // an abort or promotion lost is the one that matters: the rollout would go on
    for (const auto& [id, d] : unrecorded_decisions) {
      if (id == rollout_id && (d.action == "abort" || d.action == "promote")) end = d.action;
    }
    fmt::print(stderr,
               "sluice route: stopping with {} decision(s) and {} analysis(es) of rollout {} not in the rollout store{} "
               "(the decisions are in the log above); a restart resumes from what the store holds{}\n",
               unrecorded_decisions.size(), unrecorded_analyses.size(), rollout_id,
               state_unsaved ? ", nor its latest state" : "",
               end.empty() ? ""
                           : fmt::format(": its {} is among them, so restarted it goes on with the candidate at its "
                                         "stored weight; {} it again then",
                                         end == "abort" ? "abort" : "promotion", end));
  }
}

void Router::Impl::record_outcome(const std::string& version, const RequestOutcome& outcome) {
  if (!rollout_store) return;  // a follower: the controller analyzes
  MutexLock lock(rollout_mu);
  // While held, a version's requests go to the other for want of a replica: evidence of neither.
  if (!rollout || rollout->finished() || !rollout->held_for().empty()) return;
  if (version == rollout->spec().candidate) {
    candidate_window.add(outcome);
  } else if (version == rollout->spec().stable) {
    stable_window.add(outcome);
  }
}

// Every analysis interval: a verdict once both versions have enough requests in the window,
// which then starts again; a failure past failureLimit aborts (Rollout::record_analysis).
void Router::Impl::analyze_rollout(double now) {
  if (last_analysis == 0) last_analysis = now;
  if (now - last_analysis < rollout->spec().analysis.interval_seconds) return;
  const AnalysisConfig& config = rollout->spec().analysis;
  const AnalysisVerdict v = analyze(stable_window, candidate_window, config, shadow_window,
                                    rollout->spec().shadow.fraction > 0);
  last_analysis = now;
  if (!v.conclusive) {
    // Waiting for shadow pairs: the latency and error windows start again, so the verdict that
    // comes judges recent requests (a window keeps its oldest samples once full).
    if (v.waiting_for_shadow) stable_window = {}, candidate_window = {};
    return;
  }
  stable_window = {};
  candidate_window = {};
  // Pairs come slower than requests: those too few to judge stay for the next window.
  if (shadow_window.pairs >= config.min_shadow_pairs) shadow_window = {};
  const std::string reason = v.reason;
  unrecorded_analyses.emplace_back(
      rollout_id, StoredAnalysis{now, rollout->step(), v.passed, reason, nlohmann::json::parse(v.metrics.dump())});
  persist_rollout(rollout->record_analysis(now, v.passed, reason));
}

// The suite against one available replica of each version, on the eval thread; its verdict is
// recorded as an analysis of the step it was started at.
void Router::Impl::start_eval(double now) {
  const RolloutSpec& spec = rollout->spec();
  EvalEndpoint stable, candidate;
  for (const BackendView& v : pool.snapshot()) {
    if (!v.available) continue;
    const std::shared_ptr<const BackendConfig> b = pool.config(v.index);
    for (auto [version, e] : {std::pair{&spec.stable, &stable}, std::pair{&spec.candidate, &candidate}}) {
      if (b->version == *version && e->url.empty()) *e = {b->url.to_string() + "/v1", b->api_key};
    }
  }
  last_eval = now;
  if (stable.url.empty() || candidate.url.empty() || !config.eval_gate) return;  // tried again next interval
  eval_running = true;
  if (eval_thread.joinable()) eval_thread.join();  // the last one, finished
  eval_thread = std::thread([this, suite = spec.analysis.eval_suite, max_drop = spec.analysis.eval_max_drop,
                             step = rollout->step(), id = rollout_id, stable, candidate] {
    Result<EvalVerdict> v = config.eval_gate(suite, max_drop, stable, candidate);
    const double at = epoch_now();
    const bool passed = v && v->passed;
    const std::string reason = v ? fmt::format("eval {}: {}", suite, v->reason)
                                 : fmt::format("eval {} could not run: {}", suite, v.error().message());
    {
      MutexLock lock(rollout_mu);
      eval_running = false;
      last_eval = at;
      if (!rollout || rollout_id != id || rollout->finished() || rollout->step() != step) return;
      unrecorded_analyses.emplace_back(id, StoredAnalysis{at, step, passed, reason, v ? v->metrics : nlohmann::json()});
      persist_rollout(rollout->record_eval(at, passed, reason));
    }
    // Not written here: the next tick of rollout_loop wakes the writer thread. The loop joins
    // this thread with rollout_mu held once eval_running is false, so it must take no lock after.
  });
}

net::awaitable<void> Router::Impl::rollout_loop() {
  net::steady_timer timer(co_await net::this_coro::executor);
  while (!stopping) {
    // The versions of the replicas present and not draining ("" for one not yet reported).
    std::vector<std::string> versions;
    for (const BackendPool::Stats& b : pool.stats()) {
      if (!b.draining) versions.push_back(b.version);
    }
    {
      MutexLock lock(rollout_mu);
      if (rollout && !rollout->finished() && !warming) {
        const double now = epoch_now();
        // A version with no replica to take its share (removed or drained since the start, or
        // missing after a restart) holds the steps (Rollout::hold).
        std::string missing;
        for (const std::string& v : {rollout->spec().stable, rollout->spec().candidate}) {
          if (missing.empty() && std::ranges::find(versions, v) == versions.end()) missing = v;
        }
        if (!missing.empty() && rollout->hold(now, missing)) {
          // The analysis waits too: what the windows hold since the version went is no evidence
          // (its requests went to the other version), and they start again when it is back.
          stable_window = {};
          candidate_window = {};
          const auto unreported = std::ranges::count(versions, std::string());
          fmt::print(stderr, "sluice route: rollout {} '{}' holds at step {}: no replica takes version '{}'{}; its "
                     "steps wait until one does\n", rollout_id, rollout->spec().name, rollout->step(), missing,
                     unreported > 0 ? fmt::format(" ({} replica(s) have not reported their version yet)", unreported)
                                    : std::string());
        } else if (missing.empty() && rollout->unhold(now)) {
          fmt::print(stderr, "sluice route: rollout {} '{}': every version has a replica again; its steps go on\n",
                     rollout_id, rollout->spec().name);
          // A whole interval of requests before the next verdict, none of them from the hold.
          last_analysis = now;
          stable_window = {};
          candidate_window = {};
        }
        if (rollout->held_for().empty()) analyze_rollout(now);
        if (missing.empty() && rollout->wants_eval() && !eval_running &&
            now - last_eval >= rollout->spec().analysis.interval_seconds) {
          start_eval(now);
        }
        if (!rollout->finished()) persist_rollout(rollout->advance(now));
      }
    }
    want_rollout_write();  // also what the store refused before (an abort, a promotion), tried again
    timer.expires_after(kRolloutTick);
    co_await timer.async_wait(kTuple);
  }
}

// A follower: the controller's current rollout, fetched every interval, replaces ours (a
// failed fetch keeps what we had: a controller restarting does not change any split).
net::awaitable<void> Router::Impl::follow_loop() {
  auto ex = co_await net::this_coro::executor;
  net::steady_timer timer(ex);
  auto url = http::parse_url(config.follow_url);
  http::HttpOptions options;
  options.connect_timeout = ms(config.connect_timeout_seconds);
  options.request_timeout = ms(std::max(1.0, config.follow_interval_seconds * 4));
  http::HttpConnection connection(ex, *url, options);
  bool warned = false;
  while (!stopping) {
    http::HttpRequest req;
    req.target = url->target("/admin/rollouts");
    req.headers.push_back({"Authorization", "Bearer " + config.admin_key});
    auto r = co_await connection.request(req);
    std::string problem;
    if (!r) {
      problem = r.error().message;
    } else if (auto body = parse_json(r->body); !body || !body->is_object()) {
      problem = "the answer is not a JSON object";
    } else if (const Json& current = (*body)["current"]; current.is_null()) {
      MutexLock lock(rollout_mu);
      rollout.reset();
    } else {
      auto spec = parse_rollout(nlohmann::json::parse(current.value("spec", Json::object()).dump()));
      auto restored = spec ? Rollout::restore(*spec, nlohmann::json::parse(current.value("state", Json::object()).dump()))
                           : Result<Rollout>(Error(spec.error()));
      if (!restored) {
        problem = restored.error().message();
      } else {
        MutexLock lock(rollout_mu);
        rollout = std::move(*restored);
        rollout_id = current.value("id", int64_t{0});
      }
    }
    if (!problem.empty() && !warned) {
      fmt::print(stderr, "sluice route: following {}: {} (keeping the rollout as it was)\n", config.follow_url, problem);
    }
    warned = !problem.empty();
    timer.expires_after(ms(config.follow_interval_seconds));
    co_await timer.async_wait(kTuple);
  }
}

namespace {

// A request that only fills a replica's KV cache with its prompt: one token, whole, no extras.
std::string warm_body(const std::string& body) {
  Json j = Json::parse(body, nullptr, false);
  if (!j.is_object()) return body;
  j["max_tokens"] = 1;
  if (j.contains("max_completion_tokens")) j["max_completion_tokens"] = 1;
  j["stream"] = false;
  j["n"] = 1;
  for (const char* key : {"stream_options", "min_tokens", "logprobs", "top_logprobs", "echo", "best_of"}) j.erase(key);
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace

net::awaitable<void> Router::Impl::warm_candidate(std::vector<HotPrefixes::Hot> hot, std::string version,
                                                  double timeout_seconds, int64_t id) {
  auto ex = co_await net::this_coro::executor;
  const auto started = Clock::now();
  const auto deadline = started + ms(timeout_seconds);
  int replicas = 0, sent = 0, answered = 0;
  int64_t least = hot.back().requests, most = hot.front().requests;
  for (const BackendView& v : pool.snapshot()) {
    const std::shared_ptr<const BackendConfig> b = pool.config(v.index);
    if (!v.available || b->version != version) continue;
    ++replicas;
    http::HttpOptions options;
    options.connect_timeout = ms(config.connect_timeout_seconds);
    options.request_timeout = ms(timeout_seconds);
    http::HttpConnection connection(ex, b->url, options);
    for (const HotPrefixes::Hot& h : hot) {
      if (Clock::now() >= deadline) break;
      http::HttpRequest req;
      req.method = "POST";
      req.target = b->url.path + h.target;
      req.body = warm_body(h.body);
      req.headers.push_back({"Content-Type", "application/json"});
      if (!b->api_key.empty()) req.headers.push_back({"Authorization", "Bearer " + b->api_key});
      auto r = co_await connection.request(req);
      ++sent;
      answered += r.has_value();
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  const double now = epoch_now();
  {
  MutexLock lock(rollout_mu);
  if (rollout_id != id) co_return;  // another rollout started meanwhile: its own warming holds
  warming = false;
  if (!rollout || rollout->finished()) co_return;
  std::vector<RolloutDecision> decisions = {
      {now, rollout->step(), "warm",
       fmt::format("the {} hottest prompt prefixes (shared by {} to {} requests) sent to {} replica{} of {}: {} of {} "
                   "answered in {:.1f} s",
                   hot.size(), least, most, replicas, replicas == 1 ? "" : "s", version, answered, sent, seconds)}};
  for (RolloutDecision& d : rollout->advance(now)) decisions.push_back(std::move(d));
  persist_rollout(decisions);
  }
  want_rollout_write();
}

}  // namespace sluice::router
