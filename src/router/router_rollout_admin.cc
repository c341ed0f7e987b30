// The rollout admin routes of the router (router.h lists them): GET /admin/rollouts (the current
// rollout with its decisions and analyses, stored and still queued for the store), and POST to
// start, pause, resume, promote or abort one.
#include <filesystem>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/strand.hpp>

#include "router/router_impl.h"

namespace sluice::router {

namespace {

Json rollout_json(const Rollout& r, int64_t id, const std::vector<RolloutDecision>& decisions) {
  Json out = Json::object();
  out["id"] = id;
  out["name"] = r.spec().name;
  out["stable"] = r.spec().stable;
  out["candidate"] = r.spec().candidate;
  out["phase"] = std::string(phase_name(r.phase()));
  out["step"] = r.step();
  out["weight"] = r.weight();
  out["failed_analyses"] = r.failed_analyses();
  out["state"] = Json::parse(r.state().dump());
  out["spec"] = Json::parse(to_json(r.spec()).dump());
  Json list = Json::array();
  for (const RolloutDecision& d : decisions) {
    list.push_back({{"at", d.at}, {"step", d.step}, {"action", d.action}, {"reason", d.reason}});
  }
  out["decisions"] = list;
  return out;
}

}  // namespace

Json Router::Impl::current_rollout_json(bool with_analyses) {
  int64_t id = 0;
  std::optional<Rollout> copy;
  // The store's history, then what is still queued for it (not yet written, or refused): all
  // of it, each once (the writer holds rollout_store_mu while it moves entries).
  if (!rollout_store) {  // a follower: the controller keeps the history
    MutexLock lock(rollout_mu);
    return rollout ? rollout_json(*rollout, rollout_id, {}) : Json(nullptr);
  }
  MutexLock store_lock(rollout_store_mu);
  std::vector<RolloutDecision> queued;
  std::vector<StoredAnalysis> queued_analyses;
  {
    MutexLock lock(rollout_mu);
    if (!rollout) return nullptr;
    copy = *rollout;
    id = rollout_id;
    for (const auto& [i, d] : unrecorded_decisions) {
      if (i == id) queued.push_back(d);
    }
    for (const auto& [i, a] : unrecorded_analyses) {
      if (i == id) queued_analyses.push_back(a);
    }
  }
  auto stored = rollout_store->decisions(id);
  std::vector<RolloutDecision> decisions = stored ? std::move(*stored) : std::vector<RolloutDecision>{};
  decisions.insert(decisions.end(), queued.begin(), queued.end());
  Json out = rollout_json(*copy, id, decisions);
  if (!copy->finished() && !copy->held_for().empty()) out["held_for_version"] = copy->held_for();
  if (with_analyses) {
    Json list = Json::array();
    auto analyses = rollout_store->analyses(id);
    if (!analyses) analyses = std::vector<StoredAnalysis>{};
    analyses->insert(analyses->end(), queued_analyses.begin(), queued_analyses.end());
    for (const StoredAnalysis& a : *analyses) {
      list.push_back({{"at", a.at}, {"step", a.step}, {"passed", a.passed}, {"reason", a.reason},
                      {"metrics", Json::parse(a.metrics.dump())}});
    }
    out["analyses"] = list;
  }
  return out;
}

net::awaitable<bool> Router::Impl::admin_rollouts(beast::tcp_stream& client, bhttp::request<bhttp::string_body>& req,
                                                  std::string_view path, bool keep) {
  auto bad = [](std::string message) { return error_body(message, "invalid_request_error"); };
  const bool get = req.method() == bhttp::verb::get || req.method() == bhttp::verb::head,
             post = req.method() == bhttp::verb::post;
  if (!rollout_store && !config.follow_url.empty()) {
    if (!(get && path == "/admin/rollouts")) {
      co_return co_await reply(
          req, client, 409, bad(fmt::format("this router follows {}: manage rollouts there", config.follow_url)), keep);
    }
    int64_t id = 0;
    std::optional<Rollout> copy;
    {
      MutexLock lock(rollout_mu);
      if (rollout) copy = *rollout, id = rollout_id;
    }
    Json out = {{"current", copy ? rollout_json(*copy, id, {}) : Json(nullptr)}, {"following", config.follow_url}};
    co_return co_await reply(req, client, 200, out.dump(), keep);
  }
  if (!rollout_store) {
    co_return co_await reply(req, client, 404, bad("rollouts are off: start sluice route with --rollout-db FILE"),
                             keep);
  }
  static constexpr std::string_view kActions[] = {"pause", "resume", "promote", "abort"};
  const std::string_view action = path == "/admin/rollouts" ? "" : path.substr(std::string_view("/admin/rollouts/").size());
  if (!action.empty() && std::find(std::begin(kActions), std::end(kActions), action) == std::end(kActions)) {
    co_return co_await reply(req, client, 404, bad(fmt::format("no admin route {}", path)), keep);
  }
  if (!(post || (get && action.empty()))) {
    Headers allow;
    allow.emplace_back("Allow", action.empty() ? "GET, HEAD, POST" : "POST");
    co_return co_await reply(req, client, 405, bad(fmt::format("{} takes {}", path, allow.back().second)), keep,
                             "application/json", &allow);
  }
  auto current = [&] { return current_rollout_json(false); };
  if (get) {
    Json history = Json::array();
    if (auto list = rollout_store->list(20)) {
      for (const StoredRollout& r : *list) {
        history.push_back({{"id", r.id}, {"name", r.spec.name}, {"stable", r.spec.stable},
                           {"candidate", r.spec.candidate}, {"phase", r.phase}, {"created", r.created},
                           {"updated", r.updated}});
      }
    }
    Json out = {{"current", current()}, {"history", history}};
    // The current rollout's row as it is now, not as last stored (a refusing store lags).
    for (Json& h : out["history"]) {
      if (!out["current"].is_null() && h["id"] == out["current"]["id"]) h["phase"] = out["current"]["phase"];
    }
    co_return co_await reply(req, client, 200, out.dump(), keep);
  }
  auto parsed = parse_json(req.body().empty() ? std::string_view("{}") : std::string_view(req.body()));
  if (const std::string problem = body_problem(parsed); !problem.empty()) {
    co_return co_await reply(req, client, 400, bad(problem), keep);
  }
  const Json body = std::move(*parsed);
  const double now = epoch_now();
  if (action.empty()) {
    auto spec = parse_rollout(nlohmann::json::parse(body.dump()));
    if (!spec) co_return co_await reply(req, client, 400, bad(spec.error().message()), keep);
    if (Status s = check_new_rollout_labels(*spec); !s)
      co_return co_await reply(req, client, 400, bad(s.message()), keep);
    if (!spec->analysis.eval_suite.empty()) {
      std::error_code ec;
      const std::string problem =
          !config.eval_gate ? "this router cannot run eval suites (sluice route runs them; an embedded router needs an "
                              "eval gate)"
          : !std::filesystem::is_regular_file(spec->analysis.eval_suite, ec)
              ? fmt::format("rollout.analysis.evalSuite: no file '{}' (a path as the router sees it)",
                            spec->analysis.eval_suite)
              : std::string();
      if (!problem.empty()) co_return co_await reply(req, client, 400, bad(problem), keep);
    }
    // A version no replica carries is a typo, not a rollout.
    for (const std::string& v : {spec->stable, spec->candidate}) {
      bool found = false;
      for (const auto& b : pool.stats()) found = found || b.version == v;
      if (!found) {
        co_return co_await reply(
            req, client, 400,
            bad(fmt::format("no replica has version '{}' (label replicas with --backend URL,version=V or "
                            "the admin API's \"version\")",
                            v)),
            keep);
      }
    }
    if (spec->shadow.noise_fraction > 0) {
      int stable_replicas = 0;
      for (const auto& b : pool.stats()) stable_replicas += b.version == spec->stable;
      if (stable_replicas < 2) {
        co_return co_await reply(
            req, client, 400,
            bad(fmt::format("rollout.shadow.noiseFraction copies requests to a second replica of the stable version "
                            "'{}', which has {} (set it to 0, or add a replica)",
                            spec->stable, stable_replicas)),
            keep);
      }
    }
    // (No co_await while a lock is held: the answer is written after.)
    int status = 201;
    std::string error;
    {
      // One start at a time, and no store write between the checks below and the new row.
      MutexLock store_lock(rollout_store_mu);
      std::optional<Rollout> fresh;
      {
        MutexLock lock(rollout_mu);
        if (rollout && !rollout->finished()) {
        status = 409;
        error = fmt::format("rollout {} '{}' is {}: promote or abort it first", rollout_id, rollout->spec().name,
                            phase_name(rollout->phase()));
        } else if (rollout && (rollout->state().dump() != rollout_saved || !unrecorded_decisions.empty() ||
                               !unrecorded_analyses.empty())) {
          status = 503;  // its end would be lost: the retries write only the current rollout
          error = fmt::format("rollout {} '{}' ended, but the store has not yet taken its end (see the router's log); "
                              "try again once it has", rollout_id, rollout->spec().name);
        } else {
          fresh.emplace(std::move(*spec), now);
        }
      }
      // The new row is written without rollout_mu (routing goes on meanwhile); a finished
      // rollout, all stored, cannot change before the new one replaces it.
      Result<int64_t> id = fresh ? rollout_store->create(*fresh, now) : Result<int64_t>(int64_t{0});
      if (fresh && !id) {
        status = 503;  // a locked or full file: nothing started, and a retry may succeed
        error = fmt::format("{}: the rollout did not start; try again once the store takes writes",
                            id.error().message());
      } else if (fresh) {
        MutexLock lock(rollout_mu);
        rollout = std::move(*fresh);
        rollout_id = *id;
        rollout_saved.clear();
        stable_window = {};
        candidate_window = {};
        shadow_window = {};
        last_analysis = now;
        std::vector<RolloutDecision> decisions = {
            {now, 0, "start", fmt::format("{} -> {}", rollout->spec().stable, rollout->spec().candidate)}};
        const WarmConfig& warm = rollout->spec().warm;
        std::vector<HotPrefixes::Hot> hot;
        if (warm.prefixes > 0) hot = hot_prefixes.hottest(static_cast<size_t>(warm.prefixes));
        warming = !hot.empty();  // (not an aborted rollout's warming, still running)
        if (warming) {
          // The steps wait for the candidate's cache to be warmed (warm_candidate).
          net::co_spawn(net::make_strand(ioc),
                        warm_candidate(std::move(hot), rollout->spec().candidate, warm.timeout_seconds, rollout_id),
                        net::detached);
        } else {
          for (RolloutDecision& d : rollout->advance(now)) decisions.push_back(std::move(d));
        }
        persist_rollout(decisions);
      }
    }
    write_rollout_store();
    if (status == 503) co_return co_await reply(req, client, status, error_body(error, "server_error"), keep);
    if (status != 201) co_return co_await reply(req, client, status, bad(error), keep);
    co_return co_await reply(req, client, 201, current().dump(), keep);
  }
  for (const auto& [k, v] : body.items()) {
    if (k != "reason")
      co_return co_await reply(req, client, 400, bad(fmt::format("unknown field \"{}\" for {}", k, path)), keep);
  }
  if (body.contains("reason") && !body["reason"].is_string()) {
    co_return co_await reply(req, client, 400, bad("\"reason\" must be a string"), keep);
  }
  const std::string reason = body.value("reason", std::string());
  int status = 200;
  std::string error;
  {
    MutexLock lock(rollout_mu);
    if (!rollout) {
      status = 404;
      error = "no rollout has been started";
    } else {
      Result<RolloutDecision> d = action == "pause"     ? rollout->pause(now, reason)
                                  : action == "resume"  ? rollout->resume(now, reason)
                                  : action == "promote" ? rollout->promote(now, reason)
                                                        : rollout->abort(now, reason);
      if (!d) {
        status = 409;
        error = d.error().message();
      } else {
        std::vector<RolloutDecision> decisions = {std::move(*d)};
        if (action == "resume") {
          for (RolloutDecision& more : rollout->advance(now)) decisions.push_back(std::move(more));
        }
        persist_rollout(decisions);
      }
    }
  }
  write_rollout_store();
  if (status != 200) co_return co_await reply(req, client, status, bad(error), keep);
  co_return co_await reply(req, client, 200, current().dump(), keep);
}

}  // namespace sluice::router
