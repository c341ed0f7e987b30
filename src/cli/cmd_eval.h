// What the files of `sluice eval` share (cmd_eval.cc: the commands and their flags;
// cmd_eval_gate.cc: runs loaded as baselines, the comparison's reports and the gate's exit code).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/status.h"
#include "eval/compare.h"
#include "eval/store.h"

namespace sluice::cli::eval_cmd {

inline constexpr int kExitRegressed = 1;
inline constexpr int kExitInfra = 3;
inline constexpr int kExitInconclusive = 4;

struct ReportOptions {
  bool json = false;
  std::string junit, markdown, html;
};

struct GateOptions {
  std::string max_drop = "2pp";
  double alpha = 0.05;
  std::string fail_on = "regression";
  int32_t resamples = 10'000;
  uint64_t seed = 1;
};

struct EvalOptions {
  std::string db;
  // run
  std::string suite;
  int32_t jobs = 4;
  int32_t repeat = 0;
  bool no_cache = false;
  bool if_changed = false;
  std::string base_url, model;
  std::vector<std::string> set;
  double timeout = 120;
  int32_t retries = 4;
  std::string save_baseline, baseline;
  bool no_progress = false;
  bool strict = false;
  // compare
  std::vector<std::string> runs;
  bool aa = false;
  // baseline set / show / export / history
  std::string name;
  int32_t limit = 20;
  ReportOptions report;
  GateOptions gate;
};

// A baseline: a name set with `baseline set`, a run id, or a JSON file written by `eval export`.
struct Loaded {
  eval::RunRow run;
  std::vector<eval::ResultRow> rows;
};

// Says `message` and gives the infrastructure exit code (3).
int infra(const std::string& message);
// --max-drop: "2pp", "2%" or "0.02" -> 0.02; a number in [0, 1].
Result<double> parse_drop(const std::string& s);
Status write_file(const std::string& path, const std::string& text);
// A name `baseline set` and --save-baseline may give (not empty, all digits or *.json).
Status check_baseline_name(const std::string& name);
// A finished run: a failed or interrupted one lacks answers.
Status check_baseline_run(const eval::RunRow& run);
// A baseline name, a run id, or an exported run (.json).
Result<Loaded> load_run(eval::Store& store, const std::string& ref);
// Compares, prints and writes the reports; the exit code of the gate.
int gate(eval::Store& store, const Loaded& base, const Loaded& cand, const EvalOptions& o);

}  // namespace sluice::cli::eval_cmd
