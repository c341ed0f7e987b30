#include "eval/store.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <type_traits>

#include <fmt/format.h>

#include "common/sqlite.h"

namespace sluice::eval {
namespace {

constexpr const char* kSchema = R"sql(
PRAGMA journal_mode = WAL;
PRAGMA synchronous = NORMAL;
CREATE TABLE IF NOT EXISTS runs (
  id INTEGER PRIMARY KEY AUTOINCREMENT, suite TEXT, suite_path TEXT, fingerprint TEXT,
  started TEXT, finished TEXT, status TEXT, options TEXT, summary TEXT);
CREATE TABLE IF NOT EXISTS results (
  run_id INTEGER, item_key TEXT, sample INTEGER, provider TEXT, prompt TEXT, test TEXT, vars TEXT,
  request TEXT, response TEXT, output TEXT, pass INTEGER, score REAL, grades TEXT, latency_ms REAL,
  system_fingerprint TEXT, error TEXT, PRIMARY KEY (run_id, item_key, sample));
CREATE TABLE IF NOT EXISTS cache (key TEXT PRIMARY KEY, response TEXT, latency_ms REAL, created TEXT);
CREATE TABLE IF NOT EXISTS baselines (name TEXT PRIMARY KEY, run_id INTEGER, set_at TEXT);
)sql";

using sqlite::Stmt;
constexpr std::string_view kStore = "eval store";

// A JSON column ("" is null; text that is not JSON comes back as a string).
Json col_json(const Stmt& s, int i) {
  const std::string t = s.col_text(i);
  if (t.empty()) return nullptr;
  Json j = Json::parse(t, nullptr, false);
  return j.is_discarded() ? Json(t) : j;
}

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

RunRow read_run(const Stmt& s) {
  RunRow r;
  r.id = s.col_int(0);
  r.suite = s.col_text(1);
  r.suite_path = s.col_text(2);
  r.fingerprint = s.col_text(3);
  r.started = s.col_text(4);
  r.finished = s.col_text(5);
  r.status = s.col_text(6);
  r.options = col_json(s, 7);
  r.summary = col_json(s, 8);
  return r;
}

template <typename Read>
auto first_row(Stmt& s, Read read, sqlite3* db, const std::string& path, const char* what) {
  return sqlite::first_row(s, read, db, kStore, path, what);
}

constexpr const char* kRunColumns = "id, suite, suite_path, fingerprint, started, finished, status, options, summary";

}  // namespace

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Result<std::unique_ptr<Store>> Store::open(const std::string& path) {
  SLUICE_ASSIGN_OR_RETURN(sqlite3* db, sqlite::open(path, kSchema, kStore));
  std::unique_ptr<Store> store(new Store(db, path));
  SLUICE_RETURN_IF_ERROR(store->close_abandoned_runs());
  return store;
}

namespace {

// This process on this machine: a run's owner, so a later process can tell a run left
// "running" by a process that is gone (a second Ctrl-C, a kill) from one still going.
Json this_process() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return {{"host", host}, {"pid", static_cast<int64_t>(::getpid())}};
}

}  // namespace

Status Store::close_abandoned_runs() {
  std::vector<int64_t> gone;
  {
    MutexLock lock(mu_);
    Stmt s(db_, "SELECT id, options FROM runs WHERE status = 'running'");
    const Json me = this_process();
    while (s.step() == SQLITE_ROW) {
      const Json options = col_json(s, 1);
      if (!options.is_object() || !options.contains("owner") || !options["owner"].is_object()) continue;
      const Json& owner = options["owner"];
      if (owner.value("host", std::string()) != me["host"].get<std::string>() || !owner.contains("pid") ||
          !owner["pid"].is_number_integer()) {
        continue;  // another machine's (a shared file): it cannot be checked from here
      }
      const auto pid = static_cast<pid_t>(owner["pid"].get<int64_t>());
      if (pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH) gone.push_back(s.col_int(0));
    }
  }
  for (int64_t id : gone) {
    if (Status s = finish_run(id, "interrupted", {{"interrupted", true}, {"abandoned", true}}); !s) return s;
  }
  return Status::ok();
}

Store::~Store() {
  MutexLock lock(mu_);
  sqlite3_close(db_);
}

Status Store::exec(const std::string& sql) { return sqlite::exec(db_, sql); }

Status Store::error(const char* what) { return sqlite::error(db_, kStore, path_, what); }

Result<int64_t> Store::begin_run(const RunRow& run) {
  MutexLock lock(mu_);
  Stmt s(db_, "INSERT INTO runs (suite, suite_path, fingerprint, started, status, options) VALUES (?, ?, ?, ?, 'running', ?)");
  if (!s.ok()) return Error(error("begin run"));
  Json options = run.options.is_object() ? run.options : Json::object();
  options["owner"] = this_process();
  s.text(1, run.suite).text(2, run.suite_path).text(3, run.fingerprint).text(4, utc_now()).text(5, dump(options));
  if (s.step() != SQLITE_DONE) return Error(error("begin run"));
  return sqlite3_last_insert_rowid(db_);
}

Status Store::add_result(int64_t run_id, const ResultRow& r) {
  MutexLock lock(mu_);
  Stmt s(db_,
         "INSERT OR REPLACE INTO results (run_id, item_key, sample, provider, prompt, test, vars, request, response, "
         "output, pass, score, grades, latency_ms, system_fingerprint, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
         "?, ?, ?, ?, ?)");
  if (!s.ok()) return error("add result");
  s.integer(1, run_id).text(2, r.item_key).integer(3, r.sample).text(4, r.provider).text(5, r.prompt).text(6, r.test);
  s.text(7, dump(r.vars)).text(8, dump(r.request)).text(9, dump(r.response)).text(10, r.output);
  s.integer(11, r.pass).real(12, r.score).text(13, dump(r.grades)).real(14, r.latency_ms);
  s.text(15, r.system_fingerprint).text(16, r.error);
  if (s.step() != SQLITE_DONE) return error("add result");
  return Status::ok();
}

Status Store::finish_run(int64_t run_id, const std::string& status, const Json& summary) {
  MutexLock lock(mu_);
  Stmt s(db_, "UPDATE runs SET finished = ?, status = ?, summary = ? WHERE id = ?");
  if (!s.ok()) return error("finish run");
  s.text(1, utc_now()).text(2, status).text(3, dump(summary)).integer(4, run_id);
  if (s.step() != SQLITE_DONE) return error("finish run");
  return Status::ok();
}

Result<std::optional<CachedReply>> Store::cache_get(const std::string& key) {
  MutexLock lock(mu_);
  Stmt s(db_, "SELECT response, latency_ms FROM cache WHERE key = ?");
  s.text(1, key);
  return first_row(s, [](const Stmt& r) { return CachedReply{col_json(r, 0), r.col_real(1)}; }, db_, path_,
                   "read the cache");
}

Status Store::cache_put(const std::string& key, const Json& response, double latency_ms) {
  MutexLock lock(mu_);
  Stmt s(db_, "INSERT OR REPLACE INTO cache (key, response, latency_ms, created) VALUES (?, ?, ?, ?)");
  if (!s.ok()) return error("write the cache");
  s.text(1, key).text(2, dump(response)).real(3, latency_ms).text(4, utc_now());
  if (s.step() != SQLITE_DONE) return error("write the cache");
  return Status::ok();
}

Result<std::optional<RunRow>> Store::run(int64_t id) {
  MutexLock lock(mu_);
  Stmt s(db_, fmt::format("SELECT {} FROM runs WHERE id = ?", kRunColumns).c_str());
  s.integer(1, id);
  return first_row(s, read_run, db_, path_, "read a run");
}

Result<std::vector<RunRow>> Store::runs(const std::string& suite_path, int32_t limit) {
  MutexLock lock(mu_);
  Stmt s(db_, fmt::format("SELECT {} FROM runs WHERE suite_path = ? OR ? = '' ORDER BY id DESC LIMIT ?", kRunColumns).c_str());
  if (!s.ok()) return Error(error("list runs"));
  s.text(1, suite_path).text(2, suite_path).integer(3, limit);
  std::vector<RunRow> out;
  int rc;
  while ((rc = s.step()) == SQLITE_ROW) out.push_back(read_run(s));
  if (rc != SQLITE_DONE) return Error(error("list runs"));
  return out;
}

Result<std::optional<RunRow>> Store::last_done_run(const std::string& suite_path) {
  MutexLock lock(mu_);
  Stmt s(db_, fmt::format("SELECT {} FROM runs WHERE suite_path = ? AND status = 'done' ORDER BY id DESC LIMIT 1",
                          kRunColumns).c_str());
  s.text(1, suite_path);
  return first_row(s, read_run, db_, path_, "read runs");
}

Result<std::vector<ResultRow>> Store::results(int64_t run_id) {
  MutexLock lock(mu_);
  Stmt s(db_,
         "SELECT item_key, sample, provider, prompt, test, vars, request, response, output, pass, score, grades, "
         "latency_ms, system_fingerprint, error FROM results WHERE run_id = ? ORDER BY rowid");
  if (!s.ok()) return Error(error("read results"));
  s.integer(1, run_id);
  std::vector<ResultRow> out;
  int rc;
  while ((rc = s.step()) == SQLITE_ROW) {
    ResultRow r;
    r.item_key = s.col_text(0);
    r.sample = static_cast<int32_t>(s.col_int(1));
    r.provider = s.col_text(2);
    r.prompt = s.col_text(3);
    r.test = s.col_text(4);
    r.vars = col_json(s, 5);
    r.request = col_json(s, 6);
    r.response = col_json(s, 7);
    r.output = s.col_text(8);
    r.pass = s.col_int(9) != 0;
    r.score = s.col_real(10);
    r.grades = col_json(s, 11);
    r.latency_ms = s.col_real(12);
    r.system_fingerprint = s.col_text(13);
    r.error = s.col_text(14);
    out.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) return Error(error("read results"));
  return out;
}

Status Store::set_baseline(const std::string& name, int64_t run_id) {
  MutexLock lock(mu_);
  Stmt s(db_, "INSERT OR REPLACE INTO baselines (name, run_id, set_at) VALUES (?, ?, ?)");
  if (!s.ok()) return error("set a baseline");
  s.text(1, name).integer(2, run_id).text(3, utc_now());
  if (s.step() != SQLITE_DONE) return error("set a baseline");
  return Status::ok();
}

Result<std::optional<int64_t>> Store::baseline(const std::string& name) {
  MutexLock lock(mu_);
  Stmt s(db_, "SELECT run_id FROM baselines WHERE name = ?");
  s.text(1, name);
  return first_row(s, [](const Stmt& r) { return r.col_int(0); }, db_, path_, "read a baseline");
}

}  // namespace sluice::eval
