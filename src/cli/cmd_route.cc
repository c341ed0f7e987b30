// sluice route: one OpenAI endpoint over many replicas (src/router/router.h does the work).
#include <fstream>
#include <iostream>

#include "cli/commands.h"
#include "common/http_client.h"
#include "eval/yaml_json.h"
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
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t end = std::min(s.find(sep, at), s.size());
    std::string part = s.substr(at, end - at);
    if (!part.empty()) out.push_back(part);
    at = end + 1;
  }
  return out;
}

int run_route(RouteOptions& o) {
  router::RouterConfig& c = o.config;
  std::vector<std::string> lines = o.backends;
  if (!o.backends_file.empty()) {
    std::ifstream in(o.backends_file);
    if (!in) return fail(fmt::format("cannot read --backends-file '{}'", o.backends_file));
    std::string line;
    while (std::getline(in, line)) {
      const size_t hash = line.find('#');
      if (hash != std::string::npos) line.resize(hash);
      line.erase(0, line.find_first_not_of(" \t\r"));
      line.erase(line.find_last_not_of(" \t\r") + 1);
      if (!line.empty()) lines.push_back(line);
    }
  }
  for (const std::string& text : lines) {
    auto b = router::parse_backend(text);
    if (!b) return fail_usage(b.error().message());
    c.backends.push_back(*b);
  }
  for (const std::string& text : o.discover) {
    auto d = router::parse_discovery(text);
    if (!d) return fail_usage(d.error().message());
    c.discover.push_back(*d);
  }
  c.session_headers = split(o.session_headers, ',');
  if (o.controller && c.rollout_db.empty()) c.rollout_db = "sluice-rollouts.db";
  if (const char* key = std::getenv("SLUICE_API_KEY"); key && c.api_key.empty()) c.api_key = key;
  if (const char* key = std::getenv("SLUICE_ADMIN_KEY"); key && c.admin_key.empty()) c.admin_key = key;
  if (!c.admin_key.empty() && c.admin_key == c.api_key) {
    return fail_usage("--admin-key must differ from --api-key: a client could change the replicas otherwise");
  }
  auto r = router::Router::create(c);
  if (!r) return r.error().code() == StatusCode::kInvalid ? fail_usage(r.error().message()) : fail(r.error().message());
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

// `sluice route rollout ...`: the admin API's /admin/rollouts from the command line.
struct RolloutCliOptions {
  std::string url = "http://127.0.0.1:8080";
  std::string admin_key;
  std::string action;  // start, status, pause, resume, promote, abort
  std::string file;    // start: the spec (YAML or JSON; "-": stdin)
  std::string reason;
  bool json = false;
};

std::string describe_rollout(const nlohmann::ordered_json& r) {
  if (r.is_null()) return "no rollout has been started\n";
  std::string out = fmt::format("rollout {} '{}' {} -> {}: {} at step {}, the candidate at {}%\n", r.value("id", 0),
                                r.value("name", ""), r.value("stable", ""), r.value("candidate", ""),
                                r.value("phase", ""), r.value("step", 0), r.value("weight", 0.0));
  for (const auto& d : r.value("decisions", nlohmann::ordered_json::array())) {
    out += fmt::format("  step {}: {}: {}\n", d.value("step", 0), d.value("action", ""), d.value("reason", ""));
  }
  return out;
}

int run_rollout(const RolloutCliOptions& o) {
  std::string key = o.admin_key;
  if (const char* env = std::getenv("SLUICE_ADMIN_KEY"); env && key.empty()) key = env;
  if (key.empty()) return fail_usage("the admin API needs its key: --admin-key KEY or $SLUICE_ADMIN_KEY");
  auto url = http::parse_url(o.url);
  if (!url) return fail_usage(fmt::format("--url: {}", url.error().message()));
  http::HttpRequest req;
  req.headers.push_back({"Authorization", "Bearer " + key});
  if (o.action == "status") {
    req.target = url->target("/admin/rollouts");
  } else if (o.action == "start") {
    std::string text;
    if (o.file == "-") {
      text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    } else {
      std::ifstream in(o.file);
      if (!in) return fail(fmt::format("cannot read the rollout '{}'", o.file));
      text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    auto spec = eval::parse_yaml(text);
    if (!spec) return fail(fmt::format("{}: {}", o.file, spec.error().message()));
    req.method = "POST";
    req.target = url->target("/admin/rollouts");
    req.body = spec->dump();
  } else {
    req.method = "POST";
    req.target = url->target("/admin/rollouts/" + o.action);
    req.body = o.reason.empty() ? "{}" : nlohmann::json{{"reason", o.reason}}.dump();
  }
  auto r = http::fetch(*url, req);
  if (!r) {
    std::string message = r.error().message;
    if (r.error().kind == http::ErrorKind::kStatus) {
      auto body = nlohmann::ordered_json::parse(r.error().body, nullptr, false);
      if (!body.is_discarded() && body.contains("error")) message = body["error"].value("message", message);
    }
    return fail(message);
  }
  auto body = nlohmann::ordered_json::parse(r->body, nullptr, false);
  if (body.is_discarded()) return fail("the router's answer is not JSON: " + r->body.substr(0, 200));
  if (o.json) {
    std::cout << body.dump(2) << "\n";
  } else if (o.action == "status") {
    std::cout << describe_rollout(body["current"]);
    for (const auto& h : body.value("history", nlohmann::ordered_json::array())) {
      std::cout << fmt::format("  #{} '{}' {} -> {}: {}\n", h.value("id", 0), h.value("name", ""),
                               h.value("stable", ""), h.value("candidate", ""), h.value("phase", ""));
    }
  } else {
    std::cout << describe_rollout(body);
  }
  return finish_stdout();
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
                  "the others (default 1, 0.01..100); ',version=V': its version label, which canary rollouts split "
                  "traffic by")
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
      ->capture_default_str()->check(CLI::Range(0.1, 3600.0))->group(replicas);
  cmd->add_option("--admin-key", c.admin_key,
                  "Turns on the admin API (/admin/replicas: list, add, remove, drain, weight) for 'Authorization: "
                  "Bearer KEY' (also $SLUICE_ADMIN_KEY); off without it")
      ->group(replicas);
  cmd->add_option("--rollout-db", c.rollout_db,
                  "SQLite file of canary rollouts (started, paused, resumed, promoted and aborted through the admin "
                  "API's /admin/rollouts, or `sluice route rollout`); a restarted router resumes the rollout in "
                  "progress. This router then runs the rollouts (the controller)")
      ->group(replicas);
  cmd->add_flag("--rollout-controller", o->controller,
                "Run canary rollouts here (the controller; other routers --follow it); the store is --rollout-db, "
                "default ./sluice-rollouts.db")
      ->group(replicas);
  cmd->add_option("--follow", c.follow_url,
                  "Follow the rollouts of the controller router at this URL (polled with --admin-key, the "
                  "controller's), so that every router instance splits traffic alike")
      ->group(replicas);
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
      ->capture_default_str()->check(CLI::Range(1.0, 100.0))->group(routing);
  cmd->add_option("--max-attempts", c.max_attempts,
                  "Replicas tried for one request (retries only before anything reached the client)")
      ->capture_default_str()->check(CLI::Range(1, 16))->group(routing);
  cmd->add_option("--retry-budget", c.retry_budget, "Retries of a 429 or 5xx in flight at most this fraction of requests in flight (at least 3); a replica that is gone is always retried elsewhere")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0))->group(routing);
  const char* health = "Health";
  cmd->add_option("--health-interval", c.health_interval_seconds, "Seconds between GET /health checks of each replica")
      ->capture_default_str()->check(CLI::PositiveNumber)->group(health);
  cmd->add_option("--health-timeout", c.health_timeout_seconds, "Seconds a health check (and a /metrics scrape) may take")
      ->capture_default_str()->check(CLI::PositiveNumber)->group(health);
  cmd->add_option("--health-fall", c.health.fall, "Failed checks in a row that mark a replica down")
      ->capture_default_str()->check(CLI::Range(1, 100))->group(health);
  cmd->add_option("--health-rise", c.health.rise, "Passed checks in a row that mark it up again")
      ->capture_default_str()->check(CLI::Range(1, 100))->group(health);
  cmd->add_option("--eject-after", c.health.eject_after,
                  "Connect failures or 5xx in a row that eject a replica (10 s, doubling, at most 300 s; at most half)")
      ->capture_default_str()->check(CLI::Range(1, 1000))->group(health);
  cmd->add_option("--slow-start", c.health.slow_start_seconds,
                  "Seconds a replica back up takes to ramp from a tenth to its full share of requests (0: at once)")
      ->capture_default_str()->check(CLI::Range(0.0, 3600.0))->group(health);
  cmd->add_option("--metrics-interval", c.metrics_interval_seconds,
                  "Seconds between scrapes of each replica's /metrics for its waiting requests (0: never)")
      ->capture_default_str()->check(CLI::Range(0.0, 3600.0))->group(health);
  const char* server = "Server";
  cmd->add_option("--host", c.host, "Address to listen on")->capture_default_str()->group(server);
  cmd->add_option("--port", c.port, "Port to listen on (0: any free port)")->capture_default_str()->group(server);
  cmd->add_option("--threads", c.threads, "I/O threads")->capture_default_str()->check(CLI::Range(1, 256))->group(server);
  cmd->add_option("--api-key", c.api_key, "Clients must send 'Authorization: Bearer KEY' (also $SLUICE_API_KEY)")
      ->group(server);
  cmd->add_option("--max-body-bytes", c.max_body_bytes, "Larger request bodies get 413")
      ->capture_default_str()->group(server);
  cmd->add_option("--idle-timeout", c.idle_timeout_seconds, "Seconds a client connection may stay silent")
      ->capture_default_str()->check(CLI::PositiveNumber)->group(server);
  cmd->add_option("--connect-timeout", c.connect_timeout_seconds,
                  "Seconds to resolve a replica's name and connect to it (also a --discover lookup's limit)")
      ->capture_default_str()->check(CLI::PositiveNumber)->group(server);
  cmd->add_option("--upstream-timeout", c.upstream_timeout_seconds, "Seconds one exchange with a replica may take")
      ->capture_default_str()->check(CLI::PositiveNumber)->group(server);
  cmd->add_option("--drain", c.drain_seconds, "Seconds in-flight requests may finish after SIGTERM")
      ->capture_default_str()->check(CLI::Range(0.0, 3600.0))->group(server);
  auto ro = std::make_shared<RolloutCliOptions>();
  CLI::App* rollout = cmd->add_subcommand(
      "rollout", "Canary rollouts on a running router (its admin API, /admin/rollouts; the router needs "
                 "--admin-key and --rollout-db)");
  rollout->require_subcommand(1);
  rollout->add_option("--url", ro->url, "The router's base URL")->capture_default_str();
  rollout->add_option("--admin-key", ro->admin_key, "The router's admin key (also $SLUICE_ADMIN_KEY)");
  rollout->add_flag("--json", ro->json, "Print the router's JSON answer");
  CLI::App* start = rollout->add_subcommand(
      "start", "Start a rollout from a spec file (YAML or JSON, '-' for stdin): name, stable, candidate, steps "
               "(setWeight, pause, analysis), analysis thresholds; see the README");
  start->add_option("file", ro->file, "The rollout spec")->required();
  start->callback([ro] { ro->action = "start"; });
  rollout->add_subcommand("status", "The current rollout (phase, step, weight, decisions) and the latest ones")
      ->callback([ro] { ro->action = "status"; });
  for (const char* action : {"pause", "resume", "promote", "abort"}) {
    CLI::App* a = rollout->add_subcommand(action, fmt::format("{} the current rollout by hand", action));
    if (std::string_view(action) != "resume") a->add_option("--reason", ro->reason, "Why, recorded with the decision");
    a->callback([ro, action] { ro->action = action; });
  }
  return [cmd, o, rollout, ro]() -> int {
    if (rollout->parsed()) return run_rollout(*ro);
    if (o->backends.empty() && o->backends_file.empty() && o->discover.empty()) {
      return fail_usage(
          "sluice route needs replicas: --backend URL (repeatable), --backends-file FILE or --discover dns:NAME:PORT");
    }
    (void)cmd;
    return run_route(*o);
  };
}

}  // namespace sluice::cli
