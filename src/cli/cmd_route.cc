// sluice route: one OpenAI endpoint over many replicas (src/router/router.h does the work).
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <utility>

#include "cli/commands.h"
#include "common/http_client.h"
#include "eval/yaml_json.h"
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
  std::string shadow_by = "request";
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
  c.shadow.by_session = o.shadow_by == "session";
  if (c.shadow.fraction > 0 && c.shadow.version.empty()) {
    return fail_usage("--shadow-fraction needs --shadow VERSION: the version the copies go to");
  }
  if (!c.shadow.version.empty() && c.shadow.fraction == 0 && c.shadow.noise_fraction == 0) {
    return fail_usage(fmt::format("--shadow {} copies nothing without --shadow-fraction (the share of requests "
                                  "copied, e.g. 0.1)",
                                  c.shadow.version));
  }
  if (o.controller && c.rollout_db.empty()) c.rollout_db = "sluice-rollouts.db";
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
  if (r.contains("held_for_version")) {
    out += fmt::format("  its steps wait: no replica has version '{}'\n", r.value("held_for_version", ""));
  }
  for (const auto& d : r.value("decisions", nlohmann::ordered_json::array())) {
    out += fmt::format("  step {}: {}: {}\n", d.value("step", 0), d.value("action", ""), d.value("reason", ""));
  }
  return out;
}

// A call of a router's admin API: its JSON answer, or the exit code of a failure (reported).
std::expected<nlohmann::ordered_json, int> call_admin(const std::string& base, std::string key,
                                                      const std::function<void(const http::Url&, http::HttpRequest&)>& fill,
                                                      std::string* error_out = nullptr) {
  if (const char* env = std::getenv("SLUICE_ADMIN_KEY"); env && key.empty()) key = env;
  if (key.empty()) return std::unexpected(fail_usage("the admin API needs its key: --admin-key KEY or $SLUICE_ADMIN_KEY"));
  auto url = http::parse_url(base);
  if (!url) return std::unexpected(fail_usage(fmt::format("--url: {}", url.error().message())));
  http::HttpRequest req;
  req.headers.push_back({"Authorization", "Bearer " + key});
  fill(*url, req);
  if (error_out && !error_out->empty()) return std::unexpected(fail(*error_out));
  auto r = http::fetch(*url, req);
  if (!r) {
    std::string message = r.error().message;
    if (r.error().kind == http::ErrorKind::kStatus) {
      auto body = nlohmann::ordered_json::parse(r.error().body, nullptr, false);
      if (!body.is_discarded() && body.contains("error")) message = body["error"].value("message", message);
      // A router answers an unknown admin path "no admin route ..."; anything else is no router.
      if (r.error().status == 404 && message.starts_with("no route ")) {
        message += fmt::format(" (is {} a router? `sluice serve` has no admin API; `sluice route` serves it)", base);
      }
    }
    return std::unexpected(fail(message));
  }
  auto body = nlohmann::ordered_json::parse(r->body, nullptr, false);
  if (body.is_discarded()) return std::unexpected(fail("the router's answer is not JSON: " + r->body.substr(0, 200)));
  return body;
}

// The admin request a `sluice route rollout` action makes; `problem` says why none can be made.
void fill_rollout_request(const RolloutCliOptions& o, const http::Url& url, http::HttpRequest& req, std::string& problem) {
  if (o.action == "status") {
    req.target = url.target("/admin/rollouts");
  } else if (o.action == "start") {
    std::string text;
    if (o.file == "-") {
      text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    } else {
      std::error_code ec;
      if (std::filesystem::is_directory(o.file, ec)) {
        problem = fmt::format("cannot read the rollout '{}': it is a folder, not a file", o.file);
        return;
      }
      std::ifstream in(o.file);
      if (!in) {
        problem = fmt::format("cannot read the rollout '{}': {}", o.file, std::strerror(errno));
        return;
      }
      text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    auto spec = eval::parse_yaml(text);
    if (!spec) {
      problem = fmt::format("{}: {}", o.file, spec.error().message());
      return;
    }
    if (!spec->is_object()) {
      problem = fmt::format("{}: a rollout is a mapping (version, steps, ...: see `sluice route rollout --help`), "
                            "not {}", o.file, spec->is_null() ? "an empty file" : "a " + std::string(spec->type_name()));
      return;
    }
    req.method = "POST";
    req.target = url.target("/admin/rollouts");
    req.body = spec->dump();
  } else {
    req.method = "POST";
    req.target = url.target("/admin/rollouts/" + o.action);
    req.body = o.reason.empty() ? "{}" : nlohmann::json{{"reason", o.reason}}.dump();
  }
}

int run_rollout(const RolloutCliOptions& o) {
  std::string problem;
  auto answer = call_admin(o.url, o.admin_key, [&](const http::Url& url, http::HttpRequest& req) {
    fill_rollout_request(o, url, req, problem);
  }, &problem);
  if (!answer) return answer.error();
  const nlohmann::ordered_json& body = *answer;
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

// `sluice route shadow ...`: the admin API's /admin/shadow from the command line.
struct ShadowCliOptions {
  std::string url = "http://127.0.0.1:8080";
  std::string admin_key;
  std::string action;  // report, status, set
  std::string version;
  double since_minutes = 0;  // report: the last N minutes only (0: all kept)
  int worst = 5;
  bool json = false;
  router::ShadowConfig set;  // set
  std::string by = "request";
};

std::string percent(const nlohmann::ordered_json& v) {
  return v.is_number() ? fmt::format("{:.1f}%", 100 * v.get<double>()) : std::string("-");
}

std::string number(const nlohmann::ordered_json& v, const char* format = "{:.3f}") {
  return v.is_number() ? fmt::format(fmt::runtime(format), v.get<double>()) : std::string("-");
}

// A text cut for a terminal line.
std::string quoted(const std::string& text, size_t max = 160) {
  std::string t = nlohmann::json(text.size() > max ? text.substr(0, max) + "..." : text).dump(-1, ' ', false,
                                                                                             nlohmann::json::error_handler_t::replace);
  return t;
}

std::string describe_shadow(const nlohmann::ordered_json& b) {
  using J = nlohmann::ordered_json;
  std::string out;
  const J& a = b.value("active", J());
  if (a.is_object()) {
    out += fmt::format("shadow in force ({}): to {}, {} of {}s, noise floor {}; at most {} in flight, timeout {} s\n",
                       b.value("source", ""), a.value("version", ""), percent(a["fraction"]), a.value("by", "request"),
                       percent(a["noiseFraction"]), a.value("maxInFlight", 0), a.value("timeout", 0.0));
  } else {
    out += "no shadow in force\n";
  }
  out += fmt::format("{} in flight", b.value("in_flight", 0));
  if (b.contains("dropped") && b["dropped"].is_object()) {
    for (auto it = b["dropped"].begin(); it != b["dropped"].end(); ++it) {
      out += fmt::format("; dropped ({}) {}", it.key(), it->is_number() ? it->get<int64_t>() : 0);
    }
  }
  out += "\n";
  return out;
}

std::string describe_shadow_report(const nlohmann::ordered_json& b) {
  using J = nlohmann::ordered_json;
  std::string out = describe_shadow(b);
  if (b.contains("candidate_versions") && b["candidate_versions"].size() > 1) {
    std::string list;
    for (auto it = b["candidate_versions"].begin(); it != b["candidate_versions"].end(); ++it) {
      list += fmt::format("{}{} {}", list.empty() ? "" : ", ", it.key(), it->get<int64_t>());
    }
    out += fmt::format("the candidate pairs below are of {} versions ({}): --version V reports one\n",
                       b["candidate_versions"].size(), list);
  }
  for (const char* arm : {"candidate", "noise"}) {
    const J& s = b["arms"][arm];
    if (s.value("pairs", 0) == 0) {
      out += fmt::format("{:<9} no pairs\n", arm);
      continue;
    }
    out += fmt::format(
        "{:<9} {} pairs ({} shadow errors, {} sampled): exact match {} (of those not sampled), disagreement {} "
        "(shadow errors included), "
        "finish reasons agree {}; "
        "edit distance (sampled pairs too) mean {} p90 {}; first differing token p50 {}; length ratio p50 {}; "
        "logprob gap {} ({} pairs)\n",
        arm, s.value("pairs", 0), s.value("shadow_errors", 0), s.value("sampled", 0), percent(s["exact_match_rate"]),
        percent(s["disagreement_rate"]), percent(s["finish_reason_match_rate"]), number(s["edit_distance"]["mean"]),
        number(s["edit_distance"]["p90"]), number(s["first_diff_token"]["p50"], "{:.0f}"),
        number(s["length_ratio"]["p50"], "{:.2f}"), number(s["logprob_gap"]["mean"]), s["logprob_gap"].value("pairs", 0));
    if (s["json"].value("primary_json", 0) > 0) {
      out += fmt::format("          JSON answers: {}, the shadow's valid too {}\n", s["json"].value("primary_json", 0),
                         percent(s["json"]["shadow_valid_rate"]));
    }
  }
  if (b["excess_disagreement"].is_number()) {
    out += fmt::format("the candidate's disagreement beyond the noise floor: {:+.1f} points\n",
                       100 * b["excess_disagreement"].get<double>());
  }
  const J& worst = b.value("worst", J::array());
  if (!worst.empty()) out += "the most differing pairs:\n";
  for (const J& w : worst) {
    const J& c = w["comparison"];
    out += fmt::format("  #{} {} {} -> {} ({})\n", w.value("id", 0), w.value("target", ""), w.value("primary_replica", ""),
                       w.value("shadow_replica", ""),
                       c.is_object() ? fmt::format("edit distance {:.2f}, first differing token {}",
                                                   c.value("edit_distance", 0.0), c.value("first_diff_token", -1))
                                     : "shadow error: " + w["shadow"].value("error", std::string()));
    out += fmt::format("    request: {}\n    primary: {} [{}]\n    shadow:  {} [{}]\n", quoted(w.value("request", "")),
                       quoted(w["primary"].value("text", "")), w["primary"].value("finish_reason", ""),
                       quoted(w["shadow"].value("text", "")), w["shadow"].value("finish_reason", ""));
  }
  return out;
}

int run_shadow(const ShadowCliOptions& o) {
  auto answer = call_admin(o.url, o.admin_key, [&](const http::Url& url, http::HttpRequest& req) {
    if (o.action == "set") {
      router::ShadowConfig c = o.set;
      c.version = o.version;
      c.by_session = o.by == "session";
      req.method = "POST";
      req.target = url.target("/admin/shadow");
      req.body = router::to_json(c).dump();
    } else if (o.action == "status") {
      req.target = url.target("/admin/shadow");
    } else {
      std::string query = fmt::format("?worst={}", o.worst);
      if (!o.version.empty()) query += "&version=" + o.version;
      if (o.since_minutes > 0) {
        const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
        query += fmt::format("&since={:.3f}", now - 60 * o.since_minutes);
      }
      req.target = url.target("/admin/shadow/report") + query;
    }
  });
  if (!answer) return answer.error();
  if (o.json) {
    std::cout << answer->dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
  } else {
    std::cout << (o.action == "report" ? describe_shadow_report(*answer) : describe_shadow(*answer));
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
      ->capture_default_str()->check(CLI::Range(0.1, 3600.0))->group(replicas);
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
      ->capture_default_str()->check(CLI::Range(0.0, 1.0))->group(shadow);
  cmd->add_option("--shadow-by", o->shadow_by,
                  "request: each request drawn at random; session: whole sessions (a hash of the session key)")
      ->capture_default_str()->check(CLI::IsMember({"request", "session"}))->group(shadow);
  cmd->add_option("--shadow-noise", c.shadow.noise_fraction,
                  "The share also copied to a second replica of the primary's own version: the noise floor a "
                  "candidate's differences are judged against (needs two replicas of that version)")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0))->group(shadow);
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
      ->capture_default_str()->check(CLI::Range(1.0, 100.0))->group(routing);
  cmd->add_option("--max-attempts", c.max_attempts,
                  "Replicas tried for one request (retries only before anything reached the client)")
      ->capture_default_str()->check(CLI::Range(1, 16))->group(routing);
  cmd->add_option("--retry-budget", c.retry_budget, "Retries of a 429 or 5xx in flight at most this fraction of requests in flight (at least 3); a replica that is gone is always retried elsewhere")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0))->group(routing);
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
      ->capture_default_str()->check(CLI::Range(0.0, 3600.0))->group(health);
  cmd->add_option("--metrics-interval", c.metrics_interval_seconds,
                  "Seconds between scrapes of each replica's /metrics for its waiting requests (0: never)")
      ->capture_default_str()->check(CLI::Range(0.0, 3600.0))->group(health);
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
    a->add_option("--reason", ro->reason, "Why, recorded with the decision");
    a->callback([ro, action] { ro->action = action; });
  }
  auto so = std::make_shared<ShadowCliOptions>();
  CLI::App* shadow_cmd = cmd->add_subcommand(
      "shadow", "Shadow traffic on a running router (its admin API, /admin/shadow; the router needs --admin-key)");
  shadow_cmd->require_subcommand(1);
  shadow_cmd->add_option("--url", so->url, "The router's base URL")->capture_default_str();
  shadow_cmd->add_option("--admin-key", so->admin_key, "The router's admin key (also $SLUICE_ADMIN_KEY)");
  shadow_cmd->add_flag("--json", so->json, "Print the router's JSON answer");
  CLI::App* report = shadow_cmd->add_subcommand(
      "report", "Compared pairs: exact-match and disagreement rates per arm (candidate, noise floor), edit distance, "
                "first differing token, length ratio, finish reasons, JSON validity, logprob gap, the worst pairs");
  report->add_option("--version", so->version, "Only copies to this version");
  report->add_option("--since", so->since_minutes, "Only the last N minutes (default: every pair kept)")
      ->check(non_negative_number());
  report->add_option("--worst", so->worst, "The most differing pairs shown with both outputs")
      ->capture_default_str()->check(CLI::Range(0, 1000));
  report->callback([so] { so->action = "report"; });
  shadow_cmd->add_subcommand("status", "The shadow in force, copies in flight and dropped")->callback([so] { so->action = "status"; });
  CLI::App* set = shadow_cmd->add_subcommand("set", "Set the router's shadow (a running rollout's own shadow takes precedence)");
  set->add_option("--version", so->version, "The version copies go to");
  set->add_option("--fraction", so->set.fraction, "The share of requests (or sessions) copied; 0: off")
      ->required()->check(CLI::Range(0.0, 1.0));
  set->add_option("--by", so->by, "request or session")->capture_default_str()->check(CLI::IsMember({"request", "session"}));
  set->add_option("--noise", so->set.noise_fraction, "The share copied to a second replica of the primary's version")
      ->check(CLI::Range(0.0, 1.0));
  set->add_option("--max-in-flight", so->set.max_in_flight, "Copies in flight at most")->capture_default_str()->check(CLI::Range(1, 100000));
  set->add_option("--timeout", so->set.timeout_seconds, "Seconds a copy may take")->capture_default_str()->check(positive_number());
  set->add_option("--retention", so->set.retention, "Compared pairs kept")->capture_default_str();
  set->callback([so] { so->action = "set"; });
  // `route rollout status --url U` as well as `route rollout --url U status`: a leaf passes the
  // options it does not know up to its command.
  // Their --help lists those options too, so that a leaf's help is all a user needs.
  for (CLI::App* parent : {rollout, shadow_cmd}) {
    const std::string footer = fmt::format(
        "Options of `sluice route {}`, accepted here too:\n"
        "  --url TEXT={}\n"
        "                              The router's base URL\n"
        "  --admin-key TEXT            The router's admin key (also $SLUICE_ADMIN_KEY, or route's --admin-key)\n"
        "  --json                      Print the router's JSON answer",
        parent->get_name(), parent == rollout ? ro->url : so->url);
    for (CLI::App* leaf : parent->get_subcommands({})) leaf->fallthrough()->footer(footer);
  }
  return [cmd, o, rollout, ro, shadow_cmd, so]() -> int {
    // `route --admin-key K rollout ...`: the router's key, given before the command, serves too.
    if (ro->admin_key.empty()) ro->admin_key = o->config.admin_key;
    if (so->admin_key.empty()) so->admin_key = o->config.admin_key;
    if (rollout->parsed()) return run_rollout(*ro);
    if (shadow_cmd->parsed()) return run_shadow(*so);
    if (o->backends.empty() && o->backends_file.empty() && o->discover.empty()) {
      return fail_usage(
          "sluice route needs replicas: --backend URL (repeatable), --backends-file FILE or --discover dns:NAME:PORT");
    }
    (void)cmd;
    return run_route(*o);
  };
}

}  // namespace sluice::cli
