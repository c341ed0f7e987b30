// sluice eval: run a suite against OpenAI-compatible endpoints, store the run, compare it with a
// baseline item by item, and gate CI on the verdict (src/eval/ does the work).
//
// Exit codes: 0 ok (or nothing changed with --if-changed), 1 regressed, 2 bad usage or a bad
// suite, 3 infrastructure (an endpoint unreachable, answers missing, the store unwritable),
// 4 inconclusive (with --fail-on inconclusive); 130 interrupted (Ctrl-C). Nothing compared (no
// item in both runs) is 3 under any --fail-on: no evidence is no pass.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "cli/cmd_eval.h"
#include "cli/commands.h"
#include "eval/compare.h"
#include "eval/dataset.h"
#include "eval/report.h"
#include "eval/runner.h"

namespace sluice::cli {
namespace {

using namespace eval_cmd;  // cmd_eval.h

std::string default_db() {
  const char* env = std::getenv("SLUICE_EVAL_DB");
  return env && *env ? env : "sluice-eval.db";
}

// Ctrl-C during `eval run`: the run stops after the requests in flight and is stored as
// interrupted; a second one ends the process at once (the default action is back).
std::atomic<bool> g_stop{false};
std::atomic<int> g_stop_signal{0};  // the first one: the exit status is 128 + it, as a shell's

extern "C" void on_stop_signal(int sig) {
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, sig);
  g_stop.store(true);
  static constexpr char kSaid[] = "\nsluice eval: stopping after the requests in flight (again to quit now)\n";
  [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, kSaid, sizeof kSaid - 1);
  // The next of either quits at once (signal() is async-signal-safe).
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  (void)sig;
}

// The run's options from the flags: --set FIELD=VALUE as request fields (JSON values, else text),
// a progress bar on a terminal.
Result<eval::RunOptions> run_options(const EvalOptions& o) {
  eval::RunOptions ro;
  ro.jobs = o.jobs;
  ro.repeat = o.repeat;
  ro.use_cache = !o.no_cache;
  ro.base_url = o.base_url;
  ro.model = o.model;
  ro.call.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout * 1000));
  ro.call.max_retries = o.retries;
  for (const std::string& kv : o.set) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) return Error(StatusCode::kInvalid, "--set '{}' must be FIELD=VALUE", kv);
    const std::string text = kv.substr(eq + 1);
    eval::Json v = eval::Json::parse(text, nullptr, false);
    if (v.is_discarded() && !text.empty() && (text[0] == '-' || std::isdigit(static_cast<unsigned char>(text[0])))) {
      // A number JSON cannot hold (1e400) would otherwise go out as the text "1e400".
      char* end = nullptr;
      const double d = std::strtod(text.c_str(), &end);
      if (end == text.c_str() + text.size() && !std::isfinite(d)) {
        return Error(StatusCode::kInvalid, "--set '{}': the number is out of range", kv);
      }
    }
    const eval::Json value = v.is_discarded() ? eval::Json(text) : v;
    if (Status s = eval::check_request_field(kv.substr(0, eq), value); !s) {
      return Error(StatusCode::kInvalid, "--set '{}': {}", kv, s.message());
    }
    ro.params[kv.substr(0, eq)] = value;
  }
  if (!o.no_progress && isatty(STDERR_FILENO)) {
    ro.progress = [](int64_t done, int64_t total) {
      constexpr int64_t kWidth = 30;
      const int64_t filled = total > 0 ? std::clamp<int64_t>(kWidth * done / total, 0, kWidth) : kWidth;
      char bar[kWidth + 1] = {};
      for (int64_t i = 0; i < kWidth; ++i) bar[i] = i < filled ? '#' : '.';
      std::fprintf(stderr, "\reval: [%s] %lld/%lld requests", bar, static_cast<long long>(done), static_cast<long long>(total));
      if (done >= total) std::fprintf(stderr, "\n");
      std::fflush(stderr);
    };
  }
  return ro;
}

int run_eval_run(EvalOptions& o) {
  if ((!o.report.markdown.empty() || !o.report.html.empty()) && o.baseline.empty()) {
    return fail_usage("--markdown and --html report a comparison: give --baseline (a run alone goes to --junit or --json)");
  }
  if (!o.save_baseline.empty()) {
    if (Status s = check_baseline_name(o.save_baseline); !s) return fail_usage("--save-baseline: " + s.message());
  }
  if (auto drop = parse_drop(o.gate.max_drop); !drop) return fail_usage(drop.error().message());
  auto suite = eval::load_suite(o.suite);
  if (!suite) return fail_usage(suite.error().message());
  auto refuse_not_run = [](const std::vector<std::string>& not_run) {
    for (const std::string& n : not_run) std::cerr << "not run: " << n << "\n";
    return fail_usage(fmt::format("{} part(s) of the suite cannot run (--strict)", not_run.size()));
  };
  if (o.strict && !suite->not_run.empty()) return refuse_not_run(suite->not_run);
  auto run_opts = run_options(o);
  if (!run_opts) return fail_usage(run_opts.error().message());
  eval::RunOptions& ro = *run_opts;
  auto store = eval::Store::open(o.db);
  if (!store) return infra(store.error().message());
  // The baseline is looked up before anything is sent: a wrong name costs no requests.
  std::optional<Loaded> base;
  if (!o.baseline.empty()) {
    auto b = load_run(**store, o.baseline);
    if (!b) return fail_usage(b.error().message());
    if (Status s = check_baseline_run(b->run); !s) return fail_usage(s.message());
    base = std::move(*b);
  }
  auto plan = eval::plan_run(*suite, ro);
  if (!plan) {
    if (plan.error().code() == StatusCode::kUnavailable) return infra(plan.error().message());
    for (const std::string& n : suite->not_run) std::cerr << "not run: " << n << "\n";  // why, where it is a provider
    return fail_usage(plan.error().message());
  }
  // Parts found at planning too (a likelihood task on a chat provider).
  if (o.strict && !plan->suite.not_run.empty()) return refuse_not_run(plan->suite.not_run);
  for (const std::string& n : plan->notes) std::cerr << "note: " << n << "\n";
  if (o.if_changed) {
    auto last = (*store)->last_done_run(std::filesystem::absolute(o.suite).lexically_normal().string());
    if (!last) return infra(last.error().message());
    if (*last && (*last)->fingerprint == plan->fingerprint) {
      (o.report.json ? std::cerr : std::cout) << fmt::format("unchanged: run {} ({}) has the same fingerprint {} (the suite, every rendered request and "
                               "each endpoint's system_fingerprint); nothing to evaluate\n",
                               (*last)->id, (*last)->started, plan->fingerprint);
      if (!base) return finish_stdout();
      // The gate holds as it did for that run: a re-run of a failed job does not turn it green.
      auto rows = (*store)->results((*last)->id);
      if (!rows) return infra(rows.error().message());
      return gate(**store, *base, Loaded{**last, std::move(*rows)}, o);
    }
    if (*last) std::cerr << fmt::format("changed since run {} (fingerprint {} -> {})\n", (*last)->id, (*last)->fingerprint, plan->fingerprint);
  }
  ro.stop = &g_stop;
  auto* previous_int = std::signal(SIGINT, on_stop_signal);
  auto* previous_term = std::signal(SIGTERM, on_stop_signal);
  auto outcome = eval::execute_run(*plan, **store, ro);
  std::signal(SIGINT, previous_int);
  std::signal(SIGTERM, previous_term);
  if (!outcome) return infra(outcome.error().message());
  if (outcome->interrupted) {
    std::cerr << fmt::format("sluice eval: interrupted: run {} is stored as interrupted, ungraded; {} of {} answers "
                             "are in the cache, and a re-run resumes from them\n",
                             outcome->run_id, outcome->num_sent, plan->tasks.size());
    return 128 + (g_stop_signal.load() != 0 ? g_stop_signal.load() : SIGINT);
  }
  auto run = (*store)->run(outcome->run_id);
  auto rows = (*store)->results(outcome->run_id);
  if (!run || !*run || !rows) return infra("cannot read the run back from " + o.db);
  // With --json, stdout holds one JSON document: the run's, or with --baseline the comparison's
  // (the run's summary then goes to stderr).
  std::ostream& text_out = o.report.json ? std::cerr : std::cout;
  if (o.report.json && o.baseline.empty()) std::cout << eval::run_json(**run, *rows).dump(2) << "\n";
  else text_out << eval::run_text(**run, *rows, plan->suite.not_run);
  text_out << fmt::format("  {} requests sent, {} answered from the cache ({})\n", outcome->num_sent, outcome->num_cached, o.db);
  if (!o.report.junit.empty() && o.baseline.empty()) {
    if (Status s = write_file(o.report.junit, eval::run_junit(**run, *rows)); !s) return infra(s.message());
  }
  if (outcome->num_errors > 0 && outcome->num_refused == outcome->num_errors) {
    // The endpoint's deterministic refusals (a prompt past its context): a re-run would get them again.
    return fail_usage(
        fmt::format("{} of {} samples were refused by the endpoint (first: {}); run {} is stored as "
                    "failed: change the suite or the endpoint, a re-run would be refused the same",
                    outcome->num_refused, outcome->num_samples, outcome->first_error, outcome->run_id));
  }
  if (outcome->num_errors > 0) {
    if (outcome->num_refused > 0) {
      std::cerr << fmt::format(
          "sluice eval: {} of the samples without an answer were refused by the endpoint; a "
          "re-run would be refused the same\n",
          outcome->num_refused);
    }
    return infra(fmt::format("{} of {} samples got no answer (first: {}); run {} is stored as failed, and a re-run "
                             "resumes from the cache",
                             outcome->num_errors, outcome->num_samples, outcome->first_error, outcome->run_id));
  }
  if (!o.save_baseline.empty()) {
    if (Status s = (*store)->set_baseline(o.save_baseline, outcome->run_id); !s) return infra(s.message());
    text_out << fmt::format("  baseline '{}' is now run {}\n", o.save_baseline, outcome->run_id);
  }
  if (!base) return finish_stdout();
  return gate(**store, *base, Loaded{**run, *rows}, o);
}

int run_eval_compare(EvalOptions& o) {
  auto store = eval::Store::open(o.db);
  if (!store) return infra(store.error().message());
  std::string base_ref = o.baseline, cand_ref;
  if (base_ref.empty()) {
    if (o.runs.size() != 2) return fail_usage("compare needs --baseline REF [RUN], or two runs: compare RUN_A RUN_B");
    base_ref = o.runs[0];
    cand_ref = o.runs[1];
  } else if (o.runs.size() == 1) {
    cand_ref = o.runs[0];
  } else if (o.runs.size() > 1) {
    return fail_usage("with --baseline, give at most one candidate run");
  }
  auto base = load_run(**store, base_ref);
  if (!base) return fail_usage(base.error().message());
  if (Status s = check_baseline_run(base->run); !s) return fail_usage(s.message());
  if (cand_ref.empty()) {
    auto latest = (*store)->runs("", 2);
    if (!latest) return infra(latest.error().message());
    for (const eval::RunRow& r : *latest) {
      if (r.id != base->run.id || base_ref.ends_with(".json")) {
        cand_ref = std::to_string(r.id);
        break;
      }
    }
    if (cand_ref.empty()) return fail_usage("no candidate run in " + o.db + ": run `sluice eval run SUITE` first");
  }
  auto cand = load_run(**store, cand_ref);
  if (!cand) return fail_usage(cand.error().message());
  if (cand->run.status != "done") {
    return infra(fmt::format("run {} is {}, not done: some of its answers are missing", cand->run.id, cand->run.status));
  }
  return gate(**store, *base, *cand, o);
}

int run_eval_history(EvalOptions& o) {
  auto store = eval::Store::open(o.db);
  if (!store) return infra(store.error().message());
  const std::string path = o.suite.empty() ? "" : std::filesystem::absolute(o.suite).lexically_normal().string();
  auto runs = (*store)->runs(path, o.limit);
  if (!runs) return infra(runs.error().message());
  // A suite path with a typo would list nothing, as a suite never run does: say which.
  std::error_code ec;
  if (!o.suite.empty() && runs->empty() && !std::filesystem::exists(o.suite, ec)) {
    return fail_usage(fmt::format("'{}' does not exist, and no run of it is stored in {}", o.suite, o.db));
  }
  if (o.report.json) {
    eval::Json out = eval::Json::array();
    for (const eval::RunRow& r : *runs) {
      out.push_back({{"id", r.id}, {"suite", r.suite}, {"started", r.started}, {"status", r.status},
                     {"fingerprint", r.fingerprint}, {"options", r.options}, {"summary", r.summary}});
    }
    std::cout << out.dump(2) << "\n";
    return finish_stdout();
  }
  std::cout << fmt::format("{:>5}  {:<20}  {:<11}  {:<32}  {:<24}  {:>9}  {:>7}\n", "run", "started", "status", "fingerprint",
                           "model", "pass rate", "score");
  for (const eval::RunRow& r : *runs) {
    std::string model;
    if (r.options.is_object() && r.options.contains("providers")) {
      for (const auto& p : r.options["providers"]) model += (model.empty() ? "" : ",") + p.value("model", std::string());
    }
    const eval::Json& s = r.summary;
    // The items' pass rate (with repeats, what compare counts), else the samples'.
    const char* rate = s.is_object() && s.contains("item_pass_rate") ? "item_pass_rate" : "pass_rate";
    std::cout << fmt::format("{:>5}  {:<20}  {:<11}  {:<32}  {:<24}  {:>9}  {:>7}\n", r.id, r.started, r.status,
                             r.fingerprint, model.substr(0, 24),
                             s.is_object() && s.contains(rate) ? fmt::format("{:.1f}%", 100 * s[rate].get<double>()) : "-",
                             s.is_object() && s.contains("score") ? fmt::format("{:.3f}", s["score"].get<double>()) : "-");
  }
  return finish_stdout();
}

int run_eval_show(EvalOptions& o, bool export_json) {
  auto store = eval::Store::open(o.db);
  if (!store) return infra(store.error().message());
  auto l = load_run(**store, o.name);
  if (!l) return fail_usage(l.error().message());
  if (export_json || o.report.json) std::cout << eval::run_json(l->run, l->rows).dump(2) << "\n";
  else std::cout << eval::run_text(l->run, l->rows, {});
  if (!o.report.junit.empty()) {
    if (Status s = write_file(o.report.junit, eval::run_junit(l->run, l->rows)); !s) return infra(s.message());
  }
  return finish_stdout();
}

void add_gate_options(CLI::App* cmd, EvalOptions& o) {
  cmd->add_option("--max-drop", o.gate.max_drop, "The largest drop that is not a regression: 2pp (points of a rate), 2%, or a score difference such as 0.02")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& s) {
            auto d = parse_drop(s);
            return d ? std::string() : d.error().message();
          },
          "DROP"));
  cmd->add_option("--alpha", o.gate.alpha, "Significance level of the paired tests, after Holm's correction")
      ->check(number_in(1e-6, 0.5))
      ->capture_default_str();
  cmd->add_option("--fail-on", o.gate.fail_on,
                  "When the exit code is not 0: regression (exit 1 when a metric regressed), inconclusive (also exit 4 "
                  "when the suite is too small to tell), flip (exit 1 when any item went from pass to fail), never (no "
                  "verdict fails; nothing compared, no item in both runs, is exit 3 all the same)")
      ->check(CLI::IsMember({"regression", "inconclusive", "flip", "never"}))->capture_default_str();
  cmd->add_option("--resamples", o.gate.resamples, "Bootstrap resamples")->check(CLI::Range(100, 1'000'000))->capture_default_str();
  cmd->add_option("--seed", o.gate.seed, "Seed of the bootstrap (the same seed gives the same interval)")->check(seed_validator())->capture_default_str();
  cmd->add_flag("--aa", o.aa, "A/A: the two runs are one configuration; report the noise floor and mark every changed item flaky");
}

void add_report_options(CLI::App* cmd, EvalOptions& o, bool with_pages) {
  cmd->add_flag("--json", o.report.json, "Print JSON instead of the table");
  cmd->add_option("--junit", o.report.junit, "Write JUnit XML here (one testcase per item)")->check(output_file());
  if (with_pages) {
    cmd->add_option("--markdown", o.report.markdown, "Write a Markdown summary of the comparison here (for a pull-request comment)")
        ->check(output_file());
    cmd->add_option("--html", o.report.html, "Write a self-contained HTML report of the comparison, with SVG charts, here")
        ->check(output_file());
  }
}

}  // namespace

CommandFn add_eval_command(CLI::App& app) {
  auto o = std::make_shared<EvalOptions>();
  o->db = default_db();
  CLI::App* cmd = app.add_subcommand(
      "eval", "Evaluate OpenAI-compatible endpoints with a suite, compare with a baseline, gate CI on regressions");
  cmd->require_subcommand(1);
  cmd->footer(
      "Exit codes: 0 ok, 1 regressed, 2 bad usage or suite (also: every missing answer refused by the endpoint "
      "with a 4xx), 3 infrastructure (endpoint unreachable, answers "
      "missing, nothing compared), 4 inconclusive (--fail-on inconclusive), 130 interrupted (Ctrl-C during run; 143 "
      "for SIGTERM). "
      "The store is SQLite: --db (before or after the command), or $SLUICE_EVAL_DB, or ./sluice-eval.db.");
  cmd->add_option("--db", o->db, "The run store and request cache (SQLite)")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& s) {
            // SQLite opens "" as a private temporary store: every run would vanish.
            if (s.empty()) return std::string("an empty file name");
            std::error_code ec;
            if (std::filesystem::is_directory(s, ec)) return fmt::format("'{}' is a folder: give the SQLite file", s);
            const std::filesystem::path parent = std::filesystem::path(s).parent_path();
            if (!parent.empty() && !std::filesystem::is_directory(parent, ec)) {
              return fmt::format("the folder '{}' does not exist", parent.string());
            }
            return std::string();
          },
          "FILE"));

  CLI::App* run = cmd->add_subcommand("run", "Run a suite (sluice's or a promptfooconfig.yaml) and store the run");
  run->add_option("suite", o->suite, "Suite file (YAML or JSON)")->required()->check(CLI::ExistingFile);
  run->add_option("-j,--jobs", o->jobs, "Requests in flight at once")->check(CLI::Range(1, 256))->capture_default_str();
  run->add_option("--repeat", o->repeat, "Samples per test (overrides the suite's evaluateOptions.repeat)")->check(CLI::Range(1, 1000));
  run->add_flag("--no-cache", o->no_cache, "Send every request again (answers are still cached for later runs)");
  run->add_flag("--if-changed", o->if_changed,
                "Do nothing (exit 0) when the last finished run of this suite has the same fingerprint: the suite, "
                "every rendered request and each endpoint's system_fingerprint");
  run->add_option("--base-url", o->base_url,
                  "Send every provider's requests here (e.g. http://127.0.0.1:8000/v1), and a judge's when the suite "
                  "gives it no apiBaseUrl")
      ->check(non_empty("URL"));
  run->add_option("--model", o->model, "Every provider's model")->check(non_empty("NAME"));
  run->add_option("--set", o->set, "A request field over every provider's, FIELD=VALUE (JSON value or text); repeatable")
      ->take_all();
  run->add_option("--timeout", o->timeout, "Seconds per attempt of a request")
      ->check(number_in(0.1, 86400.0))
      ->capture_default_str();
  run->add_option("--retries", o->retries,
                  "Retries of a transport error, 408, 429 or 5xx (exponential backoff with jitter)")
      ->check(CLI::Range(0, 20))
      ->capture_default_str();
  // An empty name (an unset variable in CI) would turn the gate off unseen: refused.
  run->add_option("--save-baseline", o->save_baseline, "Name this run as a baseline when it completes")
      ->check(non_empty("NAME", "a baseline name"));
  run->add_option("--baseline", o->baseline,
                  "Then compare with this baseline (name, run id or exported .json) and gate")
      ->check(non_empty("REF", "a baseline"));
  run->add_flag("--no-progress", o->no_progress, "No progress bar (shown only on a terminal)");
  run->add_flag("--strict", o->strict, "Refuse a suite that has parts that cannot run (they are listed otherwise)");
  add_gate_options(run, *o);
  add_report_options(run, *o, true);

  CLI::App* compare = cmd->add_subcommand("compare", "Compare a run with a baseline item by item, with paired tests");
  compare
      ->add_option("--baseline", o->baseline, "Baseline: a name (baseline set), a run id, or an exported run (.json)")
      ->check(non_empty("REF", "a baseline"));
  compare->add_option("runs", o->runs, "The candidate run (default: the newest), or two runs A B without --baseline");
  add_gate_options(compare, *o);
  add_report_options(compare, *o, true);

  CLI::App* baseline = cmd->add_subcommand("baseline", "Name a run as a baseline");
  baseline->require_subcommand(1);
  CLI::App* set = baseline->add_subcommand("set", "baseline set NAME RUN");
  set->add_option("name", o->name, "Baseline name")->required();
  set->add_option("run", o->limit, "Run id")->required();

  CLI::App* history = cmd->add_subcommand("history", "A suite's runs: fingerprint, date, model, scores");
  history->add_option("suite", o->suite, "Suite file (default: every suite)");
  history->add_option("-n,--limit", o->limit, "Runs to show")->check(CLI::Range(1, 100000))->capture_default_str();
  history->add_flag("--json", o->report.json, "Print JSON");

  CLI::App* show = cmd->add_subcommand("show", "A run's results (its failures, or everything with --json)");
  show->add_option("run", o->name, "Run id or baseline name")->required();
  add_report_options(show, *o, false);

  CLI::App* exp = cmd->add_subcommand("export", "A run as JSON on stdout (usable as --baseline FILE.json)");
  exp->add_option("run", o->name, "Run id or baseline name")->required();

  // `eval history --db F` as well as `eval --db F history`: the commands pass what they do not
  // know (--db) up to eval.
  for (CLI::App* sub : cmd->get_subcommands({})) {
    sub->fallthrough();
    for (CLI::App* leaf : sub->get_subcommands({})) leaf->fallthrough();
  }
  return [=]() -> int {
    if (*run) return run_eval_run(*o);
    if (*compare) return run_eval_compare(*o);
    if (*history) return run_eval_history(*o);
    if (*show) return run_eval_show(*o, false);
    if (*exp) return run_eval_show(*o, true);
    auto store = eval::Store::open(o->db);
    if (!store) return infra(store.error().message());
    auto r = (*store)->run(o->limit);
    if (!r) return infra(r.error().message());
    if (!*r) return fail_usage(fmt::format("run {} is not in {}", o->limit, o->db));
    if (Status s = check_baseline_name(o->name); !s) return fail_usage(s.message());
    if (Status s = check_baseline_run(**r); !s) return fail_usage(s.message());
    if (Status s = (*store)->set_baseline(o->name, o->limit); !s) return infra(s.message());
    std::cout << fmt::format("baseline '{}' is run {} ({}, {})\n", o->name, o->limit, (*r)->suite, (*r)->started);
    return finish_stdout();
  };
}

}  // namespace sluice::cli
