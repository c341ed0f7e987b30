// Where the router keeps shadow traffic's compared pairs (router.h, shadow_compare.h): one SQLite
// table, the newest `retention` pairs kept, and the report over them.
//
//   shadow_pairs(id, at, arm, primary_version, shadow_version, primary_replica, shadow_replica,
//                target, request, primary_text, primary_finish, shadow_text, shadow_finish,
//                shadow_status, shadow_error, comparison)          comparison as JSON
//
// `arm` is "candidate" (a copy to the shadow version) or "noise" (a copy to a second replica of
// the primary's own version: the noise floor). Texts are kept up to kMaxStoredText bytes, the
// request body up to kMaxStoredRequest. The store is a file (WAL) or ":memory:".
//
// Thread-safety: every method may be called from any thread (one connection, a mutex).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "common/mutex.h"
#include "common/status.h"
#include "router/shadow_compare.h"

struct sqlite3;

namespace sluice::router {

inline constexpr size_t kMaxStoredText = 16 << 10, kMaxStoredRequest = 8 << 10;

struct ShadowPair {
  double at = 0;             // seconds since the epoch
  std::string arm;           // "candidate" or "noise"
  std::string primary_version, shadow_version;
  std::string primary_replica, shadow_replica;
  std::string target;        // the request's path
  std::string request;       // its body
  ShadowAnswer primary, shadow;
  ShadowComparison comparison;  // when shadow.ok
};

struct ShadowReportOptions {
  std::string version;        // only pairs whose shadow version is this ("": all)
  double since = 0;           // only pairs at or after (seconds since the epoch)
  int32_t worst = 10;         // the most differing candidate pairs shown, both outputs side by side
  double bucket_seconds = 60; // the timeline's resolution
  int32_t max_buckets = 60;   // the newest buckets
};

class ShadowStore {
 public:
  static Result<std::unique_ptr<ShadowStore>> open(const std::string& path);
  ~ShadowStore();

  // Keeps the pair; then the newest `retention` only.
  Status record(const ShadowPair& pair, int64_t retention);
  // Per arm: pairs, shadow errors, exact-match and disagreement rates (a failed shadow answer
  // disagrees), histograms of edit distance and of the first differing token, length ratios,
  // finish-reason and JSON agreement, the logprob gap; the candidate's disagreement in excess of
  // the noise floor's; agreement over time; the worst differing examples.
  Result<nlohmann::ordered_json> report(const ShadowReportOptions& options);

 private:
  ShadowStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  Mutex mu_;
  sqlite3* db_ SLUICE_GUARDED_BY(mu_);
  const std::string path_;
  int64_t since_trim_ SLUICE_GUARDED_BY(mu_) = 0;
};

}  // namespace sluice::router
