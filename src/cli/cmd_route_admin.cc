// `sluice route rollout ...` and `sluice route shadow ...`: the client of a running router's
// admin API (/admin/rollouts, /admin/shadow) from the command line.
#include <cerrno>
#include <cstring>
#include <expected>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/http_client.h"
#include "eval/yaml_json.h"
#include "router/rollout.h"

namespace sluice::cli {
namespace {

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

// What `route rollout` and `route shadow` share: a leaf is required, and the router to call.
void add_client_options(CLI::App& cmd, std::string& url, std::string& admin_key, bool& json) {
  cmd.require_subcommand(1);
  cmd.add_option("--url", url, "The router's base URL")->capture_default_str();
  cmd.add_option("--admin-key", admin_key, "The router's admin key (also $SLUICE_ADMIN_KEY)");
  cmd.add_flag("--json", json, "Print the router's JSON answer");
}

}  // namespace

std::function<std::optional<int>()> add_route_admin_commands(CLI::App& route_cmd,
                                                             std::function<std::string()> router_admin_key) {
  CLI::App* cmd = &route_cmd;
  auto ro = std::make_shared<RolloutCliOptions>();
  CLI::App* rollout = cmd->add_subcommand(
      "rollout", "Canary rollouts on a running router (its admin API, /admin/rollouts; the router needs "
                 "--admin-key and --rollout-db)");
  add_client_options(*rollout, ro->url, ro->admin_key, ro->json);
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
  add_client_options(*shadow_cmd, so->url, so->admin_key, so->json);
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
      ->required()
      ->check(number_in(0.0, 1.0));
  set->add_option("--by", so->by, "request or session")->capture_default_str()->check(CLI::IsMember({"request", "session"}));
  set->add_option("--noise", so->set.noise_fraction, "The share copied to a second replica of the primary's version")
      ->check(number_in(0.0, 1.0));
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
  return [rollout, ro, shadow_cmd, so, router_admin_key]() -> std::optional<int> {
    if (ro->admin_key.empty()) ro->admin_key = router_admin_key();
    if (so->admin_key.empty()) so->admin_key = router_admin_key();
    if (rollout->parsed()) return run_rollout(*ro);
    if (shadow_cmd->parsed()) return run_shadow(*so);
    return std::nullopt;
  };
}

}  // namespace sluice::cli
