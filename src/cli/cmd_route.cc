// sluice route: one OpenAI endpoint over many replicas (src/router/router.h does the work).
#include <cerrno>
#include <fstream>
#include <iostream>
#include <optional>
#include <system_error>
#include <utility>

#include "cli/commands.h"
#include "cli/rollout_eval.h"
#include "router/router.h"

namespace sluice::cli {
namespace {

struct RouteOptions {
  router::RouterConfig config;
  std::vector<std::string> backends;
  std::vector<std::string> discover;
  std::string backends_file;
  std::string session_headers = "X-Session-ID,X-User-ID";
  bool controller = false;  // --rollout-controller
  std::string eval_db;      // --rollout-eval-db
  std::string shadow_by;    // --shadow-by, "" when not given (request)
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t end = std::min(s.find(sep, at), s.size());
    std::string part = s.substr(at, end - at);
    // "X-A, X-B": names as written around the commas (a header " X-B" never matched).
    part.erase(0, part.find_first_not_of(" \t"));
    part.erase(part.find_last_not_of(" \t") + 1);
    if (!part.empty()) out.push_back(part);
    at = end + 1;
  }
  return out;
}

int run_route(RouteOptions& o) {
  router::RouterConfig& c = o.config;
  // Each backend's text, and where it came from for errors ("" for --backend).
  std::vector<std::pair<std::string, std::string>> lines;
  for (const std::string& b : o.backends) lines.emplace_back(b, "");
  if (!o.backends_file.empty()) {
    std::ifstream in(o.backends_file);
    if (!in) {
      return fail(fmt::format("cannot read --backends-file '{}': {}", o.backends_file,
                              std::error_code(errno, std::generic_category()).message()));
    }
    std::string line;
    size_t from_file = 0;
    for (int number = 1; std::getline(in, line); ++number) {
      const size_t hash = line.find('#');
      if (hash != std::string::npos) line.resize(hash);
      line.erase(0, line.find_first_not_of(" \t\r"));
      line.erase(line.find_last_not_of(" \t\r") + 1);
      if (line.empty()) continue;
      lines.emplace_back(line, fmt::format("--backends-file '{}' line {}: ", o.backends_file, number));
      ++from_file;
    }
    if (from_file == 0 && o.backends.empty() && o.discover.empty()) {
      return fail_usage(fmt::format("--backends-file '{}' lists no backend (one URL a line; # starts a comment)",
                                    o.backends_file));
    }
  }
  for (const auto& [text, where] : lines) {
    auto b = router::parse_backend(text);
    if (!b) return fail_usage(where + b.error().message());
    c.backends.push_back(*b);
  }
  for (const std::string& text : o.discover) {
    auto d = router::parse_discovery(text);
    if (!d) return fail_usage(d.error().message());
    c.discover.push_back(*d);
  }
  c.session_headers = split(o.session_headers, ',');
  c.learn_versions = true;
  c.route_by_model = true;
  c.shadow.by_session = o.shadow_by == "session";
  if (!o.shadow_by.empty() && c.shadow.version.empty()) {
    return fail_usage("--shadow-by picks how requests are copied to a shadow version: give --shadow VERSION too");
  }
  if (c.shadow.fraction > 0 && c.shadow.version.empty()) {
    return fail_usage("--shadow-fraction needs --shadow VERSION: the version the copies go to");
  }
  if (!c.shadow.version.empty() && c.shadow.fraction == 0 && c.shadow.noise_fraction == 0) {
    return fail_usage(fmt::format("--shadow {} copies nothing without --shadow-fraction (the share of requests "
                                  "copied, e.g. 0.1)",
                                  c.shadow.version));
  }
  if (o.controller && c.rollout_db.empty()) c.rollout_db = "sluice-rollouts.db";
  if (!o.eval_db.empty() && c.rollout_db.empty()) {
    return fail_usage("--rollout-eval-db stores the eval gates of rollouts: give --rollout-db FILE (or "
                      "--rollout-controller) too");
  }
  if (!c.rollout_db.empty()) {
    std::string eval_db = o.eval_db;
    if (eval_db.empty()) {
      eval_db = c.rollout_db.ends_with(".db") ? c.rollout_db.substr(0, c.rollout_db.size() - 3) : c.rollout_db;
      eval_db += "-eval.db";
    }
    c.eval_gate = make_rollout_eval_gate(eval_db);
  }
  for (auto [name, key] : {std::pair{"SLUICE_API_KEY", &c.api_key}, std::pair{"SLUICE_ADMIN_KEY", &c.admin_key}}) {
    if (!key->empty()) continue;
    if (std::string why = empty_key_variable(name); !why.empty()) return fail_usage(why);
    if (const char* v = std::getenv(name)) *key = v;
  }
  if (!c.admin_key.empty() && c.admin_key == c.api_key) {
    return fail_usage("--admin-key must differ from --api-key: a client could change the replicas otherwise");
  }
  auto r = router::Router::create(c);
  if (!r) return r.error().code() == StatusCode::kInvalid ? fail_usage(r.error().message()) : fail(r.error().message());
  if (!c.rollout_db.empty() && c.admin_key.empty()) {
    std::cerr << "sluice route: warning: " << (o.controller ? "--rollout-controller" : "--rollout-db")
              << " without --admin-key: a rollout in the store resumes and runs, "
                 "but none can be started, paused or aborted (the admin API is off)\n";
  }
  (*r)->start();
  std::string over = fmt::format("{} replica{}", c.backends.size(), c.backends.size() == 1 ? "" : "s");
  for (const auto& d : c.discover) over += fmt::format(" + those {} lists", d.host);
  std::cout << fmt::format("sluice route: listening on http://{}:{}, {} over {}{}", c.host, (*r)->port(), c.policy,
                           over, c.admin_key.empty() ? "" : "; admin API on /admin")
            << std::endl;
  (*r)->run_until_shutdown();
  std::cout << "sluice route: stopped" << std::endl;
  return kExitOk;
}

}  // namespace

CommandFn add_route_command(CLI::App& app) {
  auto o = std::make_shared<RouteOptions>();
  router::RouterConfig& c = o->config;
  CLI::App* cmd = app.add_subcommand("route", "One OpenAI endpoint over many replicas: session affinity, "
                                              "cache-aware routing, health checks and retries");
  const char* replicas = "Replicas";
  cmd->add_option("--backend", o->backends,
                  "A replica's base URL, e.g. http://10.0.0.5:8000 (repeatable); ',key=KEY' after it: the API key "
                  "sent to it (otherwise the client's Authorization is passed on); ',weight=W': its share relative to "
                  "the others (default 1, 0.01..100); ',version=V': its version label, which canary rollouts and shadow "
                  "traffic split by (without one: the model id and system_fingerprint it reports, 'ID@FINGERPRINT')")
      ->group(replicas);
  cmd->add_option("--backends-file", o->backends_file,
                  "A file of replicas, one per line as --backend ('#' starts a comment)")
      ->group(replicas);
  cmd->add_option("--discover", o->discover,
                  "dns:NAME:PORT: every address NAME resolves to is a replica on PORT, looked up again every "
                  "--discover-interval (a Kubernetes headless service lists its ready pods so); ',key=KEY' and "
                  "',weight=W' as for --backend (repeatable)")
      ->group(replicas);
  cmd->add_option("--discover-interval", c.discover_interval_seconds,
                  "Seconds between DNS lookups of --discover names (a failed lookup keeps the replicas as they were)")
      ->capture_default_str()
      ->check(number_in(0.1, 3600.0))
      ->group(replicas);
  cmd->add_option("--admin-key", c.admin_key,
                  "Turns on the admin API (/admin/replicas: list, add, remove, drain, weight) for 'Authorization: "
                  "Bearer KEY' (also $SLUICE_ADMIN_KEY); off without it")
      ->check(required_key())->group(replicas);
  cmd->add_option("--rollout-db", c.rollout_db,
                  "SQLite file of canary rollouts (started, paused, resumed, promoted and aborted through the admin "
                  "API's /admin/rollouts, or `sluice route rollout`); a restarted router resumes the rollout in "
                  "progress. This router then runs the rollouts (the controller)")
      ->group(replicas);
  cmd->add_flag("--rollout-controller", o->controller,
                "Run canary rollouts here (the controller; other routers --follow it); the store is --rollout-db, "
                "default ./sluice-rollouts.db")
      ->group(replicas);
  cmd->add_option("--rollout-eval-db", o->eval_db,
                  "The eval store of rollouts' eval suites (analysis.evalSuite); default: beside --rollout-db, "
                  "NAME-eval.db")
      ->group(replicas);
  cmd->add_option("--follow", c.follow_url,
                  "Follow the rollouts of the controller router at this URL (polled with --admin-key, the "
                  "controller's), so that every router instance splits traffic alike")
      ->group(replicas);
  const char* shadow = "Shadow traffic";
  cmd->add_option("--shadow", c.shadow.version,
                  "Copy a share of requests to the replicas of this version: their answers are compared with the "
                  "client's and never returned (GET /admin/shadow/report, `sluice route shadow report`)")
      ->group(shadow);
  cmd->add_option("--shadow-fraction", c.shadow.fraction, "The share of requests (or sessions) copied to --shadow")
      ->capture_default_str()
      ->check(number_in(0.0, 1.0))
      ->group(shadow);
  cmd->add_option("--shadow-by", o->shadow_by,
                  "request: each request drawn at random; session: whole sessions (a hash of the session key)")
      ->default_str("request")
      ->check(CLI::IsMember({"request", "session"}))
      ->group(shadow);
  cmd->add_option("--shadow-noise", c.shadow.noise_fraction,
                  "The share also copied to a second replica of the primary's own version: the noise floor a "
                  "candidate's differences are judged against (needs two replicas of that version)")
      ->capture_default_str()
      ->check(number_in(0.0, 1.0))
      ->group(shadow);
  cmd->add_option("--shadow-max-in-flight", c.shadow.max_in_flight,
                  "Copies in flight at most; past it new copies are dropped and counted, never queued")
      ->capture_default_str()->check(CLI::Range(1, 100000))->group(shadow);
  cmd->add_option("--shadow-timeout", c.shadow.timeout_seconds, "Seconds a copy may take")
      ->capture_default_str()->check(positive_number())->group(shadow);
  cmd->add_option("--shadow-retention", c.shadow.retention, "Compared pairs kept (the newest)")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{100'000'000}))->group(shadow);
  cmd->add_option("--shadow-db", c.shadow_db,
                  "SQLite file of compared pairs (default: --rollout-db's file, else kept in memory only)")
      ->group(shadow);
  const char* routing = "Routing";
  cmd->add_option("--policy", c.policy,
                  "cache_aware: where the prompt's prefix is likely cached, priced against load; session: consistent "
                  "hashing of the session key; least_load, power_of_two, round_robin, random")
      ->capture_default_str()
      ->check(CLI::IsMember(router::policy_names()))
      ->group(routing);
  cmd->add_option("--session-headers", o->session_headers,
                  "Headers that carry the session key, first present wins (comma-separated); then the body's 'user'")
      ->capture_default_str()->group(routing);
  cmd->add_option("--usage-group-header", c.usage_group_header,
                  "Header naming a request's usage group: cached and prompt tokens are summed per group on /metrics "
                  "(without it: 'session' if the request has a session key, else 'none')")
      ->capture_default_str()->group(routing);
  cmd->add_option("--max-usage-groups", c.max_usage_groups,
                  "Distinct usage groups counted; later ones count as 'other'")
      ->capture_default_str()->check(CLI::Range(1, 100000))->group(routing);
  cmd->add_option("--load-factor", c.policy_options.load_factor,
                  "Bounded load: no replica takes more than ceil(F x average) requests in flight (session, "
                  "cache_aware)")
      ->capture_default_str()
      ->check(number_in(1.0, 100.0))
      ->group(routing);
  cmd->add_option("--max-attempts", c.max_attempts,
                  "Replicas tried for one request (retries only before anything reached the client)")
      ->capture_default_str()->check(CLI::Range(1, 16))->group(routing);
  cmd->add_option("--retry-budget", c.retry_budget,
                  "Retries of a 429 or 5xx in flight at most this fraction of requests in flight (at least 3); a "
                  "replica that is gone is always retried elsewhere")
      ->capture_default_str()
      ->check(number_in(0.0, 1.0))
      ->group(routing);
  const char* health = "Health";
  cmd->add_option("--health-interval", c.health_interval_seconds, "Seconds between GET /health checks of each replica")
      ->capture_default_str()->check(positive_number())->group(health);
  cmd->add_option("--health-timeout", c.health_timeout_seconds, "Seconds a health check (and a /metrics scrape) may take")
      ->capture_default_str()->check(positive_number())->group(health);
  cmd->add_option("--health-fall", c.health.fall, "Failed checks in a row that mark a replica down")
      ->capture_default_str()->check(CLI::Range(1, 100))->group(health);
  cmd->add_option("--health-rise", c.health.rise, "Passed checks in a row that mark it up again")
      ->capture_default_str()->check(CLI::Range(1, 100))->group(health);
  cmd->add_option("--eject-after", c.health.eject_after,
                  "Connect failures or 5xx in a row that eject a replica (10 s, doubling, at most 300 s; at most half)")
      ->capture_default_str()->check(CLI::Range(1, 1000))->group(health);
  cmd->add_option("--slow-start", c.health.slow_start_seconds,
                  "Seconds a replica back up takes to ramp from a tenth to its full share of requests (0: at once)")
      ->capture_default_str()
      ->check(number_in(0.0, 3600.0))
      ->group(health);
  cmd->add_option("--metrics-interval", c.metrics_interval_seconds,
                  "Seconds between scrapes of each replica's /metrics for its waiting requests (0: never)")
      ->capture_default_str()
      ->check(number_in(0.0, 3600.0))
      ->group(health);
  const char* server = "Server";
  cmd->add_option("--host", c.host, "Address to listen on")->capture_default_str()->group(server);
  cmd->add_option("--port", c.port, "Port to listen on (0: any free port)")
      ->capture_default_str()->check(CLI::Range(0, 65535))->group(server);
  cmd->add_option("--threads", c.threads, "I/O threads")->capture_default_str()->check(CLI::Range(1, 256))->group(server);
  cmd->add_option("--api-key", c.api_key, "Clients must send 'Authorization: Bearer KEY' (also $SLUICE_API_KEY)")
      ->check(required_key())->group(server);
  cmd->add_option("--max-body-bytes", c.max_body_bytes, "Larger request bodies get 413")
      ->capture_default_str()->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40))->group(server);
  cmd->add_option("--idle-timeout", c.idle_timeout_seconds, "Seconds a client connection may stay silent")
      ->capture_default_str()->check(positive_number())->group(server);
  cmd->add_option("--connect-timeout", c.connect_timeout_seconds,
                  "Seconds to resolve a replica's name and connect to it (also a --discover lookup's limit)")
      ->capture_default_str()->check(positive_number())->group(server);
  cmd->add_option("--upstream-timeout", c.upstream_timeout_seconds, "Seconds one exchange with a replica may take")
      ->capture_default_str()->check(positive_number())->group(server);
  cmd->add_option("--drain", c.drain_seconds, "Seconds in-flight requests may finish after SIGTERM")
      ->capture_default_str()
      ->check(number_in(0.0, 3600.0))
      ->group(server);
  // `route rollout ...` and `route shadow ...`: the admin API's client (cmd_route_admin.cc).
  // `route --admin-key K rollout ...`: the router's key, given before the command, serves too.
  auto admin = add_route_admin_commands(*cmd, [o] { return o->config.admin_key; });
  return [o, admin]() -> int {
    if (std::optional<int> rc = admin(); rc) return *rc;
    if (o->backends.empty() && o->backends_file.empty() && o->discover.empty()) {
      return fail_usage(
          "sluice route needs replicas: --backend URL (repeatable), --backends-file FILE or --discover dns:NAME:PORT");
    }
    return run_route(*o);
  };
}

}  // namespace sluice::cli
