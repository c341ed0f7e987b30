// `sluice eval`: runs loaded as baselines, the comparison's reports, and the gate's exit code.
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <fmt/format.h>

#include "cli/cmd_eval.h"
#include "eval/dataset.h"
#include "eval/report.h"

namespace sluice::cli::eval_cmd {

int infra(const std::string& message) {
  std::cerr << "sluice: error: " << message << std::endl;
  return kExitInfra;
}

Result<double> parse_drop(const std::string& s) {
  std::string_view number = s;
  double scale = 1;
  for (std::string_view unit : {"pp", "%"}) {
    if (number.ends_with(unit)) {
      number.remove_suffix(unit.size());
      scale = 0.01;
      break;
    }
  }
  const std::string t(number);
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (t.empty() || !end || *end != '\0' || !(v >= 0)) {
    return Error(StatusCode::kInvalid, "--max-drop '{}' must be a number >= 0: 2pp (2 percentage points), 2%, or 0.02", s);
  }
  // A rate lies in [0, 1]: a drop past 100pp could never be reached, the gate off. (A plain
  // number also bounds mean logprobs, which have no such range.)
  if (scale != 1 && !(v <= 100)) {
    return Error(StatusCode::kInvalid, "--max-drop '{}' is past 100pp: no rate could drop that far, so nothing would "
                 "ever regress", s);
  }
  return v * scale;
}

Status write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) return Status::error(fmt::format("cannot write '{}'", path));
  return Status::ok();
}

namespace {

Result<Loaded> load_run_file(const std::string& path) {
  SLUICE_ASSIGN_OR_RETURN(std::string text, eval::read_file(path));
  const eval::Json j = eval::Json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.contains("run") || !j.contains("results")) {
    return Error(StatusCode::kInvalid, "'{}' is not a run exported by `sluice eval export`", path);
  }
  Loaded l;
  // A field of another type (a file edited by hand, another tool's JSON) is this file's error.
  try {
    const eval::Json& r = j["run"];
    l.run.id = r.value("id", int64_t{0});
    l.run.suite = r.value("suite", std::string());
    l.run.suite_path = r.value("suite_path", std::string());
    l.run.fingerprint = r.value("fingerprint", std::string());
    l.run.started = r.value("started", std::string());
    l.run.status = r.value("status", std::string());
    l.run.summary = r.value("summary", eval::Json());
    for (const eval::Json& x : j["results"]) {
      eval::ResultRow row;
      row.item_key = x.value("item", std::string());
      row.sample = x.value("sample", 0);
      row.provider = x.value("provider", std::string());
      row.prompt = x.value("prompt", std::string());
      row.test = x.value("test", std::string());
      row.vars = x.value("vars", eval::Json());
      row.output = x.value("output", std::string());
      row.pass = x.value("pass", false);
      row.score = x.value("score", 0.0);
      row.grades = x.value("grades", eval::Json());
      row.latency_ms = x.value("latency_ms", 0.0);
      row.error = x.contains("error") && x["error"].is_string() ? x["error"].get<std::string>() : "";
      l.rows.push_back(std::move(row));
    }
  } catch (const eval::Json::exception& e) {
    return Error(StatusCode::kInvalid, "'{}' is not a run exported by `sluice eval export`: {}", path, e.what());
  }
  return l;
}

}  // namespace

// A name `baseline set` and --save-baseline may give: one that a run id or an exported file
// would shadow (`5`, `x.json`) or an empty one is refused.
Status check_baseline_name(const std::string& name) {
  if (name.empty()) return Status::error("a baseline name cannot be empty", StatusCode::kInvalid);
  if (name.find_first_not_of("0123456789") == std::string::npos || name.ends_with(".json")) {
    return Status::error(fmt::format("baseline name '{}' would be read as a {}: give a name", name,
                                     name.ends_with(".json") ? "run exported to a file" : "run id"),
                         StatusCode::kInvalid);
  }
  return Status::ok();
}

// A baseline is a finished run: a failed or interrupted one lacks answers, which would count as
// fails and hide a candidate's.
Status check_baseline_run(const eval::RunRow& run) {
  if (run.status == "done") return Status::ok();
  return Status::error(fmt::format("run {} is {}, not done: some of its answers are missing, so it cannot be a "
                                   "baseline", run.id, run.status.empty() ? "of no status" : run.status),
                       StatusCode::kInvalid);
}

Result<Loaded> load_run(eval::Store& store, const std::string& ref) {
  if (ref.ends_with(".json") && std::filesystem::exists(ref)) return load_run_file(ref);
  std::optional<int64_t> id;
  SLUICE_ASSIGN_OR_RETURN(id, store.baseline(ref));
  if (!id && !ref.empty() && ref.find_first_not_of("0123456789") == std::string::npos) {
    int64_t n = 0;  // a run id; digits past int64 fall through to the error below
    if (std::from_chars(ref.data(), ref.data() + ref.size(), n).ec == std::errc()) id = n;
  }
  if (!id) {
    return Error(StatusCode::kInvalid, "'{}' is neither a baseline name, a run id, nor an exported run (.json) in {}", ref,
                 store.path());
  }
  SLUICE_ASSIGN_OR_RETURN(auto run, store.run(*id));
  if (!run) return Error(StatusCode::kInvalid, "run {} is not in {}", *id, store.path());
  Loaded l;
  l.run = std::move(*run);
  SLUICE_ASSIGN_OR_RETURN(l.rows, store.results(*id));
  return l;
}

namespace {

Status write_reports(const ReportOptions& r, const eval::Comparison& c, eval::Store& store, const eval::RunRow& cand) {
  if (!r.junit.empty()) {
    if (Status s = write_file(r.junit, eval::compare_junit(c)); !s) return s;
  }
  if (!r.markdown.empty()) {
    if (Status s = write_file(r.markdown, eval::compare_markdown(c)); !s) return s;
  }
  if (!r.html.empty()) {
    auto history = store.runs(cand.suite_path, 100);
    if (!history) return history.error();
    return write_file(r.html, eval::compare_html(c, *history));
  }
  return Status::ok();
}

}  // namespace

// Compares and reports; the exit code of the gate.
int gate(eval::Store& store, const Loaded& base, const Loaded& cand, const EvalOptions& o) {
  auto drop = parse_drop(o.gate.max_drop);
  if (!drop) return fail_usage(drop.error().message());
  eval::CompareOptions co;
  co.alpha = o.gate.alpha;
  co.max_drop = *drop;
  co.resamples = o.gate.resamples;
  co.seed = o.gate.seed;
  co.aa = o.aa;
  const eval::Comparison c = eval::compare_runs(base.run.id, base.rows, cand.run.id, cand.rows, co);
  if (o.report.json) std::cout << eval::compare_json(c).dump(2) << "\n";
  else std::cout << eval::compare_text(c);
  if (Status s = write_reports(o.report, c, store, cand.run); !s) return infra(s.message());
  if (int rc = finish_stdout(); rc != kExitOk) return rc;
  const std::string& f = o.gate.fail_on;
  // No evidence either way, under any --fail-on: the baseline is not one of this suite.
  if (c.verdict == "nothing compared") {
    return infra(fmt::format("no item is in both runs (baseline {} items, candidate {}): nothing was compared; is the "
                             "baseline a run of this suite, and did it finish?",
                             c.only_base, c.only_cand));
  }
  if (f == "never") return kExitOk;
  if (f == "flip") {
    for (const eval::ItemDiff& d : c.items) {
      if (d.base_pass && !d.cand_pass) return kExitRegressed;
    }
    return kExitOk;
  }
  if (c.verdict == "regressed") return kExitRegressed;
  if (f == "inconclusive" && c.verdict == "inconclusive") return kExitInconclusive;
  return kExitOk;
}

}  // namespace sluice::cli::eval_cmd
