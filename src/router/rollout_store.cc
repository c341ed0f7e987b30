#include "router/rollout_store.h"

#include "common/sqlite.h"

namespace sluice::router {
namespace {

using Json = nlohmann::json;
using sqlite::Stmt;
constexpr std::string_view kStore = "rollout store";

constexpr const char* kSchema = R"sql(
PRAGMA journal_mode = WAL;
PRAGMA synchronous = NORMAL;
CREATE TABLE IF NOT EXISTS rollouts (
  id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT, spec TEXT, state TEXT, phase TEXT, created REAL, updated REAL);
CREATE TABLE IF NOT EXISTS decisions (rollout_id INTEGER, at REAL, step INTEGER, action TEXT, reason TEXT);
CREATE TABLE IF NOT EXISTS analyses (
  rollout_id INTEGER, at REAL, step INTEGER, passed INTEGER, reason TEXT, metrics TEXT);
CREATE INDEX IF NOT EXISTS decisions_by_rollout ON decisions (rollout_id);
CREATE INDEX IF NOT EXISTS analyses_by_rollout ON analyses (rollout_id);
)sql";

// Bytes that are not UTF-8 (a suite's metric name, a path in a reason) become U+FFFD rather than
// an exception on the writer thread.
std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

Json parse_json(const std::string& text) {
  Json j = Json::parse(text, nullptr, false);
  return j.is_discarded() ? Json(nullptr) : j;
}

}  // namespace

Result<std::unique_ptr<RolloutStore>> RolloutStore::open(const std::string& path) {
  SLUICE_ASSIGN_OR_RETURN(sqlite3* db, sqlite::open(path, kSchema, kStore));
  // Once open, the router writes on its I/O threads (outside the lock that routing takes) and
  // retries what failed at its next tick (200 ms): another process's lock is waited for 20 ms,
  // not 10 s, so a locked file holds up that thread's other requests that long at most.
  sqlite3_busy_timeout(db, 20);
  return std::unique_ptr<RolloutStore>(new RolloutStore(db, path));
}

RolloutStore::~RolloutStore() {
  MutexLock lock(mu_);
  sqlite3_close(db_);
}

Result<int64_t> RolloutStore::create(const Rollout& rollout, double now) {
  MutexLock lock(mu_);
  Stmt s(db_, "INSERT INTO rollouts (name, spec, state, phase, created, updated) VALUES (?, ?, ?, ?, ?, ?)");
  s.text(1, rollout.spec().name).text(2, dump(to_json(rollout.spec()))).text(3, dump(rollout.state()));
  s.text(4, std::string(phase_name(rollout.phase()))).real(5, now).real(6, now);
  if (!s.ok() || s.step() != SQLITE_DONE) return Error(sqlite::error(db_, kStore, path_, "creating a rollout"));
  return sqlite3_last_insert_rowid(db_);
}

Status RolloutStore::save(int64_t id, const Rollout& rollout, double now) {
  MutexLock lock(mu_);
  Stmt s(db_, "UPDATE rollouts SET state = ?, phase = ?, updated = ? WHERE id = ?");
  s.text(1, dump(rollout.state())).text(2, std::string(phase_name(rollout.phase()))).real(3, now).integer(4, id);
  if (!s.ok() || s.step() != SQLITE_DONE) return sqlite::error(db_, kStore, path_, "saving a rollout");
  return Status::ok();
}

Status RolloutStore::record(int64_t id, const RolloutDecision& d) {
  MutexLock lock(mu_);
  Stmt s(db_, "INSERT INTO decisions (rollout_id, at, step, action, reason) VALUES (?, ?, ?, ?, ?)");
  s.integer(1, id).real(2, d.at).integer(3, d.step).text(4, d.action).text(5, d.reason);
  if (!s.ok() || s.step() != SQLITE_DONE) return sqlite::error(db_, kStore, path_, "recording a decision");
  return Status::ok();
}

Status RolloutStore::record_analysis(int64_t id, const StoredAnalysis& a) {
  MutexLock lock(mu_);
  Stmt s(db_, "INSERT INTO analyses (rollout_id, at, step, passed, reason, metrics) VALUES (?, ?, ?, ?, ?, ?)");
  s.integer(1, id).real(2, a.at).integer(3, a.step).integer(4, a.passed ? 1 : 0).text(5, a.reason);
  s.text(6, dump(a.metrics));
  if (!s.ok() || s.step() != SQLITE_DONE) return sqlite::error(db_, kStore, path_, "recording an analysis");
  return Status::ok();
}

Result<std::vector<StoredRollout>> RolloutStore::query(const char* where, int64_t arg, int32_t limit) {
  const std::string sql = fmt::format(
      "SELECT id, spec, state, phase, created, updated FROM rollouts {} ORDER BY id DESC LIMIT {}", where, limit);
  Stmt s(db_, sql.c_str());
  if (*where != '\0' && std::string_view(where).find('?') != std::string_view::npos) s.integer(1, arg);
  std::vector<StoredRollout> out;
  int rc = s.ok() ? s.step() : SQLITE_ERROR;
  for (; rc == SQLITE_ROW; rc = s.step()) {
    StoredRollout r;
    r.id = s.col_int(0);
    auto spec = parse_rollout(parse_json(s.col_text(1)));
    if (!spec) return Error(spec.error().with_context(fmt::format("{} '{}': rollout {}", kStore, path_, r.id)));
    r.spec = std::move(*spec);
    r.state = parse_json(s.col_text(2));
    r.phase = s.col_text(3);
    r.created = s.col_real(4);
    r.updated = s.col_real(5);
    out.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) return Error(sqlite::error(db_, kStore, path_, "reading rollouts"));
  return out;
}

Result<std::optional<StoredRollout>> RolloutStore::get(int64_t id) {
  MutexLock lock(mu_);
  SLUICE_ASSIGN_OR_RETURN(auto rows, query("WHERE id = ?", id, 1));
  if (rows.empty()) return std::optional<StoredRollout>();
  return std::optional<StoredRollout>(std::move(rows.front()));
}

Result<std::vector<StoredRollout>> RolloutStore::list(int32_t limit) {
  MutexLock lock(mu_);
  return query("", 0, std::max(1, limit));
}

Result<std::vector<RolloutDecision>> RolloutStore::decisions(int64_t id) {
  MutexLock lock(mu_);
  Stmt s(db_, "SELECT at, step, action, reason FROM decisions WHERE rollout_id = ? ORDER BY rowid");
  s.integer(1, id);
  auto read = [](const Stmt& r) {
    return RolloutDecision{r.col_real(0), static_cast<int32_t>(r.col_int(1)), r.col_text(2), r.col_text(3)};
  };
  return sqlite::all_rows(s, read, db_, kStore, path_, "reading decisions");
}

Result<std::vector<StoredAnalysis>> RolloutStore::analyses(int64_t id) {
  MutexLock lock(mu_);
  Stmt s(db_, "SELECT at, step, passed, reason, metrics FROM analyses WHERE rollout_id = ? ORDER BY rowid");
  s.integer(1, id);
  auto read = [](const Stmt& r) {
    return StoredAnalysis{r.col_real(0), static_cast<int32_t>(r.col_int(1)), r.col_int(2) != 0, r.col_text(3),
                          parse_json(r.col_text(4))};
  };
  return sqlite::all_rows(s, read, db_, kStore, path_, "reading analyses");
}

}  // namespace sluice::router
