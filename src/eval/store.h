// The eval store: one SQLite file (WAL) holding every run, every result row, the request cache
// and the named baselines.
//
//   runs(id, suite, suite_path, fingerprint, started, finished, status, options, summary)
//   results(run_id, item_key, sample, provider, prompt, test, vars, request, response, output,
//           pass, score, grades, latency_ms, system_fingerprint, error)      one row per sample
//   cache(key, response, latency_ms, created)   a successful answer per (endpoint fingerprint,
//                                               rendered request, sample index, seed)
//   baselines(name, run_id, set_at)
//
// A cache entry is written as soon as its answer arrives, so a run that was killed resumes
// from the cache without sending those requests again. Times are UTC, ISO 8601.
//
// Thread-safety: every method may be called from many threads (one connection, serialized by
// a mutex; SQLite's own locking keeps other processes consistent).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "eval/yaml_json.h"

struct sqlite3;

namespace sluice::eval {

struct RunRow {
  int64_t id = 0;
  std::string suite;          // the suite's description or file name
  std::string suite_path;
  std::string fingerprint;
  std::string started, finished;
  std::string status;         // running, done, failed, interrupted
  Json options;               // providers, overrides
  Json summary;               // scores per metric
};

struct ResultRow {
  std::string item_key;
  int32_t sample = 0;
  std::string provider, prompt, test;
  Json vars;
  Json request, response;
  std::string output;
  bool pass = false;
  double score = 0;
  Json grades;                // per assertion, or the likelihood details
  double latency_ms = 0;
  std::string system_fingerprint;
  std::string error;          // the answer never came (infrastructure), or the grade failed
};

struct CachedReply {
  Json response;
  double latency_ms = 0;
};

class Store {
 public:
  // Opens (creating) the file. Errors name it.
  static Result<std::unique_ptr<Store>> open(const std::string& path);
  ~Store();

  // Its options get an "owner" (host and pid), for close_abandoned_runs.
  Result<int64_t> begin_run(const RunRow& run);
  // Runs left "running" by a process of this machine that is gone (a second Ctrl-C, a kill) are
  // stored as interrupted. open() does this.
  Status close_abandoned_runs();
  Status add_result(int64_t run_id, const ResultRow& row);
  Status finish_run(int64_t run_id, const std::string& status, const Json& summary);

  Result<std::optional<CachedReply>> cache_get(const std::string& key);
  Status cache_put(const std::string& key, const Json& response, double latency_ms);

  Result<std::optional<RunRow>> run(int64_t id);
  // Runs of a suite (by suite_path, or suite when the path is empty), newest first.
  Result<std::vector<RunRow>> runs(const std::string& suite_path, int32_t limit);
  // The newest finished run of that suite.
  Result<std::optional<RunRow>> last_done_run(const std::string& suite_path);
  Result<std::vector<ResultRow>> results(int64_t run_id);

  Status set_baseline(const std::string& name, int64_t run_id);
  Result<std::optional<int64_t>> baseline(const std::string& name);

  const std::string& path() const { return path_; }

 private:
  Store(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  Status exec(const std::string& sql) SLUICE_REQUIRES(mu_);
  Status error(const char* what) SLUICE_REQUIRES(mu_);

  Mutex mu_;
  sqlite3* db_ SLUICE_GUARDED_BY(mu_);
  std::string path_;
};

// The current time, UTC, ISO 8601 ("2026-12-02T07:24:59Z").
std::string utc_now();

}  // namespace sluice::eval
