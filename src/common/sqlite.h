// The few pieces of SQLite's C API the project's stores share (the eval store, the router's
// rollout store): opening a file in WAL mode with its schema, statements finalized on scope
// exit, and the one-row query. Callers serialize use of a connection themselves.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <sqlite3.h>

#include "common/status.h"

namespace sluice::sqlite {

// A prepared statement, finalized on scope exit. Binds and reads by index (binds from 1,
// columns from 0, as SQLite's).
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) { rc_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr); }
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  bool ok() const { return rc_ == SQLITE_OK; }
  Stmt& text(int i, const std::string& v) {
    if (s_) sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& integer(int i, int64_t v) {
    if (s_) sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  Stmt& real(int i, double v) {
    if (s_) sqlite3_bind_double(s_, i, v);
    return *this;
  }
  int step() { return s_ ? sqlite3_step(s_) : SQLITE_ERROR; }
  std::string col_text(int i) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s_, i));
    return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(s_, i))) : std::string();
  }
  int64_t col_int(int i) const { return sqlite3_column_int64(s_, i); }
  double col_real(int i) const { return sqlite3_column_double(s_, i); }

 private:
  sqlite3_stmt* s_ = nullptr;
  int rc_ = SQLITE_ERROR;
};

// "<store> '<path>': <what>: <SQLite's message>".
inline Status error(sqlite3* db, std::string_view store, const std::string& path, std::string_view what) {
  return Status::error(fmt::format("{} '{}': {}: {}", store, path, what, sqlite3_errmsg(db)));
}

// Runs SQL text (several statements).
inline Status exec(sqlite3* db, const std::string& sql) {
  char* message = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &message) != SQLITE_OK) {
    std::string m = message ? message : "unknown error";
    sqlite3_free(message);
    return Status::error(m);
  }
  return Status::ok();
}

// Opens (creating) the database at `path` for one thread at a time, waits up to 10 s for
// other processes' locks, and runs `schema` (WAL mode, tables). `store` names it in errors.
inline Result<sqlite3*> open(const std::string& path, const char* schema, std::string_view store) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr) !=
      SQLITE_OK) {
    std::string message = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return Error("cannot open the {} '{}': {}", store, path, message);
  }
  sqlite3_busy_timeout(db, 10'000);
  if (Status s = exec(db, schema); !s) {
    sqlite3_close(db);
    return Error(s.with_context(fmt::format("{} '{}'", store, path)));
  }
  return db;
}

// The row a one-row query finds, read by `read`; none when it finds nothing.
template <typename Read>
auto first_row(Stmt& s, Read read, sqlite3* db, std::string_view store, const std::string& path, std::string_view what)
    -> Result<std::optional<std::invoke_result_t<Read, const Stmt&>>> {
  using T = std::invoke_result_t<Read, const Stmt&>;
  const int rc = s.ok() ? s.step() : SQLITE_ERROR;
  if (rc == SQLITE_DONE) return std::optional<T>();
  if (rc != SQLITE_ROW) return Error(error(db, store, path, what));
  return std::optional<T>(read(s));
}

// Every row a query finds, each read by `read`.
template <typename Read>
auto all_rows(Stmt& s, Read read, sqlite3* db, std::string_view store, const std::string& path, std::string_view what)
    -> Result<std::vector<std::invoke_result_t<Read, const Stmt&>>> {
  std::vector<std::invoke_result_t<Read, const Stmt&>> out;
  int rc = s.ok() ? s.step() : SQLITE_ERROR;
  for (; rc == SQLITE_ROW; rc = s.step()) out.push_back(read(s));
  if (rc != SQLITE_DONE) return Error(error(db, store, path, what));
  return out;
}

}  // namespace sluice::sqlite
