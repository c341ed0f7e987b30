// Where the router keeps its rollouts (rollout.h): one SQLite file in WAL mode, so that a router
// killed mid-rollout and restarted resumes it at the same step with the same weight, and the
// history of every rollout (each decision with its reason, each analysis) stays queryable.
//
//   rollouts(id, name, spec, state, phase, created, updated)   spec and state as JSON
//   decisions(rollout_id, at, step, action, reason)             every change, in order
//   analyses(rollout_id, at, step, passed, reason, metrics)     every analysis, metrics as JSON
//
// Times are seconds since the epoch.
//
// Thread-safety: every method may be called from any thread (one connection, a mutex).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/mutex.h"
#include "common/status.h"
#include "router/rollout.h"

struct sqlite3;

namespace sluice::router {

struct StoredRollout {
  int64_t id = 0;
  RolloutSpec spec;
  nlohmann::json state;  // Rollout::state()
  std::string phase;
  double created = 0, updated = 0;
};

struct StoredAnalysis {
  double at = 0;
  int32_t step = 0;
  bool passed = false;
  std::string reason;
  nlohmann::json metrics;
};

class RolloutStore {
 public:
  static Result<std::unique_ptr<RolloutStore>> open(const std::string& path);
  ~RolloutStore();

  // A new rollout; its id.
  Result<int64_t> create(const Rollout& rollout, double now);
  // The rollout's state now (after every change).
  Status save(int64_t id, const Rollout& rollout, double now);
  Status record(int64_t id, const RolloutDecision& decision);
  Status record_analysis(int64_t id, const StoredAnalysis& analysis);

  Result<std::optional<StoredRollout>> get(int64_t id);
  // The latest rollouts, newest first.
  Result<std::vector<StoredRollout>> list(int32_t limit);
  Result<std::vector<RolloutDecision>> decisions(int64_t id);
  Result<std::vector<StoredAnalysis>> analyses(int64_t id);

 private:
  RolloutStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  Result<std::vector<StoredRollout>> query(const char* where, int64_t arg, int32_t limit) SLUICE_REQUIRES(mu_);

  Mutex mu_;
  sqlite3* db_ SLUICE_GUARDED_BY(mu_);
  const std::string path_;
};

}  // namespace sluice::router
