#include "router/shadow_store.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>

#include "common/sqlite.h"

namespace sluice::router {
namespace {

using Json = nlohmann::ordered_json;
using sqlite::Stmt;
constexpr std::string_view kStore = "shadow store";

constexpr const char* kSchema = R"sql(
PRAGMA journal_mode = WAL;
PRAGMA synchronous = NORMAL;
CREATE TABLE IF NOT EXISTS shadow_pairs (
  id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL, arm TEXT, primary_version TEXT, shadow_version TEXT,
  primary_replica TEXT, shadow_replica TEXT, target TEXT, request TEXT, primary_text TEXT, primary_finish TEXT,
  shadow_text TEXT, shadow_finish TEXT, shadow_status INTEGER, shadow_error TEXT, comparison TEXT);
CREATE INDEX IF NOT EXISTS shadow_pairs_by_time ON shadow_pairs (at);
)sql";

// Cut at `max` bytes, on a UTF-8 boundary.
std::string cut(const std::string& s, size_t max) {
  if (s.size() <= max) return s;
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n);
}

// One pair as the report reads it (texts read only for the worst).
struct Row {
  int64_t id = 0;
  double at = 0;
  std::string arm;
  std::string version;  // the shadow's
  bool answered = false;
  Json c;  // the comparison
};

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

Json number_or_null(double x) { return std::isfinite(x) ? Json(x) : Json(nullptr); }

bool flag(const Json& c, const char* key) { return c.contains(key) && c[key].is_boolean() && c[key].get<bool>(); }

// What one arm's pairs add up to.
Json arm_stats(const std::vector<const Row*>& rows) {
  int64_t answered = 0, deterministic = 0, deterministic_exact = 0, disagree = 0, sampled = 0;
  int64_t finish_match = 0, primary_json = 0, shadow_json = 0;
  std::vector<double> edits, ratios, gaps, first_tokens;
  std::array<int64_t, 10> edit_hist{};
  // First differing token: 0, 1-3, 4-15, 16-63, 64+.
  std::array<int64_t, 5> token_hist{};
  for (const Row* r : rows) {
    if (!r->answered) {
      ++disagree;
      continue;
    }
    ++answered;
    const Json& c = r->c;
    const bool is_sampled = flag(c, "sampled");
    sampled += is_sampled;
    if (!is_sampled) {
      ++deterministic;
      deterministic_exact += flag(c, "exact");
    }
    disagree += !flag(c, "agrees");
    finish_match += flag(c, "finish_match");
    if (c.contains("shadow_json_valid")) {
      ++primary_json;
      shadow_json += flag(c, "shadow_json_valid");
    }
    const double e = c.value("edit_distance", 0.0);
    edits.push_back(e);
    ++edit_hist[std::clamp(static_cast<int>(e * 10), 0, 9)];
    ratios.push_back(c.value("length_ratio", 1.0));
    if (c.contains("logprob_gap") && c["logprob_gap"].is_number()) gaps.push_back(c["logprob_gap"].get<double>());
    const int64_t t = c.value("first_diff_token", int64_t{-1});
    if (t >= 0) {
      first_tokens.push_back(static_cast<double>(t));
      ++token_hist[t == 0 ? 0 : t < 4 ? 1 : t < 16 ? 2 : t < 64 ? 3 : 4];
    }
  }
  const auto n = static_cast<int64_t>(rows.size());
  auto rate = [](int64_t k, int64_t of) { return of ? Json(static_cast<double>(k) / static_cast<double>(of)) : Json(nullptr); };
  double gap_mean = NAN;
  if (!gaps.empty()) {
    gap_mean = 0;
    for (double g : gaps) gap_mean += g;
    gap_mean /= static_cast<double>(gaps.size());
  }
  double edit_mean = NAN;
  if (!edits.empty()) {
    edit_mean = 0;
    for (double e : edits) edit_mean += e;
    edit_mean /= static_cast<double>(edits.size());
  }
  Json edit_buckets = Json::array();
  for (int i = 0; i < 10; ++i) {
    edit_buckets.push_back({{"from", i / 10.0}, {"to", (i + 1) / 10.0}, {"pairs", edit_hist[i]}});
  }
  static constexpr const char* kTokenBuckets[] = {"0", "1-3", "4-15", "16-63", "64+"};
  Json token_buckets = Json::array();
  for (int i = 0; i < 5; ++i) token_buckets.push_back({{"tokens", kTokenBuckets[i]}, {"pairs", token_hist[i]}});
  return {{"pairs", n},
          {"answered", answered},
          {"shadow_errors", n - answered},
          {"sampled", sampled},
          {"exact_match_rate", rate(deterministic_exact, deterministic)},
          {"disagreement_rate", rate(disagree, n)},
          {"finish_reason_match_rate", rate(finish_match, answered)},
          {"json", {{"primary_json", primary_json}, {"shadow_valid_rate", rate(shadow_json, primary_json)}}},
          {"edit_distance",
           {{"mean", number_or_null(edit_mean)}, {"p50", number_or_null(quantile(edits, 0.5))},
            {"p90", number_or_null(quantile(edits, 0.9))}, {"histogram", edit_buckets}}},
          {"length_ratio", {{"p10", number_or_null(quantile(ratios, 0.1))}, {"p50", number_or_null(quantile(ratios, 0.5))},
                            {"p90", number_or_null(quantile(ratios, 0.9))}}},
          {"first_diff_token", {{"p50", number_or_null(quantile(first_tokens, 0.5))}, {"histogram", token_buckets}}},
          {"logprob_gap", {{"pairs", gaps.size()}, {"mean", number_or_null(gap_mean)}}}};
}

bool disagrees(const Row& r) { return !r.answered || !flag(r.c, "agrees"); }

}  // namespace

Result<std::unique_ptr<ShadowStore>> ShadowStore::open(const std::string& path) {
  SLUICE_ASSIGN_OR_RETURN(sqlite3* db, sqlite::open(path, kSchema, kStore));
  return std::unique_ptr<ShadowStore>(new ShadowStore(db, path));
}

ShadowStore::~ShadowStore() {
  MutexLock lock(mu_);
  sqlite3_close(db_);
}

Status ShadowStore::record(const ShadowPair& p, int64_t retention) {
  MutexLock lock(mu_);
  Stmt s(db_,
         "INSERT INTO shadow_pairs (at, arm, primary_version, shadow_version, primary_replica, shadow_replica, target, "
         "request, primary_text, primary_finish, shadow_text, shadow_finish, shadow_status, shadow_error, comparison) "
         "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  s.real(1, p.at).text(2, p.arm).text(3, p.primary_version).text(4, p.shadow_version).text(5, p.primary_replica);
  s.text(6, p.shadow_replica).text(7, p.target).text(8, cut(p.request, kMaxStoredRequest));
  s.text(9, cut(p.primary.text, kMaxStoredText)).text(10, p.primary.finish_reason);
  s.text(11, cut(p.shadow.text, kMaxStoredText)).text(12, p.shadow.finish_reason).integer(13, p.shadow.status);
  s.text(14, p.shadow.error).text(15, p.shadow.ok ? to_json(p.comparison).dump() : std::string("null"));
  if (!s.ok() || s.step() != SQLITE_DONE) return sqlite::error(db_, kStore, path_, "recording a shadow pair");
  // Trimmed every so often rather than at every insert: the table holds at most retention + 64.
  if (++since_trim_ >= 64) {
    since_trim_ = 0;
    Stmt t(db_, "DELETE FROM shadow_pairs WHERE id <= (SELECT MAX(id) FROM shadow_pairs) - ?");
    t.integer(1, retention);
    if (!t.ok() || t.step() != SQLITE_DONE) return sqlite::error(db_, kStore, path_, "trimming shadow pairs");
  }
  return Status::ok();
}

Result<nlohmann::ordered_json> ShadowStore::report(const ShadowReportOptions& o) {
  MutexLock lock(mu_);
  Stmt s(db_,
         "SELECT id, at, arm, shadow_status, shadow_error, comparison, shadow_version FROM shadow_pairs "
         "WHERE at >= ? AND (? = '' OR shadow_version = ?) ORDER BY id");
  s.real(1, o.since).text(2, o.version).text(3, o.version);
  SLUICE_ASSIGN_OR_RETURN(
      std::vector<Row> rows, sqlite::all_rows(
                                 s,
                                 [](const Stmt& st) {
                                   Row r;
                                   r.id = st.col_int(0);
                                   r.at = st.col_real(1);
                                   r.arm = st.col_text(2);
                                   r.c = Json::parse(st.col_text(5), nullptr, false);
                                   r.answered = r.c.is_object();
                                   r.version = st.col_text(6);
                                   return r;
                                 },
                                 db_, kStore, path_, "reading shadow pairs"));
  std::vector<const Row*> candidate, noise;
  for (const Row& r : rows) (r.arm == "noise" ? noise : candidate).push_back(&r);
  Json report = {{"pairs", rows.size()}};
  // The candidate pairs by shadow version: a report over several (pairs of shadows set one after
  // another) says so, rather than counting them all as the one in force.
  Json versions = Json::object();
  for (const Row* r : candidate) versions[r->version] = versions.value(r->version, int64_t{0}) + 1;
  report["candidate_versions"] = versions;
  report["arms"] = {{"candidate", arm_stats(candidate)}, {"noise", arm_stats(noise)}};
  const Json& cd = report["arms"]["candidate"]["disagreement_rate"];
  const Json& nd = report["arms"]["noise"]["disagreement_rate"];
  report["excess_disagreement"] =
      cd.is_number() ? Json(cd.get<double>() - (nd.is_number() ? nd.get<double>() : 0.0)) : Json(nullptr);

  // Agreement over time, the newest buckets.
  std::map<int64_t, std::array<int64_t, 4>> buckets;  // start -> candidate pairs, agreeing, noise pairs, agreeing
  for (const Row& r : rows) {
    auto& b = buckets[static_cast<int64_t>(std::floor(r.at / o.bucket_seconds))];
    const int k = r.arm == "noise" ? 2 : 0;
    ++b[k];
    b[k + 1] += !disagrees(r);
  }
  while (buckets.size() > static_cast<size_t>(std::max(1, o.max_buckets))) buckets.erase(buckets.begin());
  Json timeline = Json::array();
  for (const auto& [start, b] : buckets) {
    auto share = [](int64_t k, int64_t of) { return of ? Json(static_cast<double>(k) / static_cast<double>(of)) : Json(nullptr); };
    timeline.push_back({{"start", static_cast<double>(start) * o.bucket_seconds},
                        {"candidate_pairs", b[0]},
                        {"candidate_agreement", share(b[1], b[0])},
                        {"noise_pairs", b[2]},
                        {"noise_agreement", share(b[3], b[2])}});
  }
  report["timeline"] = timeline;

  // The worst: failed shadow answers first, then by edit distance, the newest among equals.
  std::vector<const Row*> worst;
  for (const Row* r : candidate) {
    if (disagrees(*r)) worst.push_back(r);
  }
  auto badness = [](const Row* r) { return r->answered ? r->c.value("edit_distance", 0.0) : 2.0; };
  std::sort(worst.begin(), worst.end(), [&](const Row* a, const Row* b) {
    return badness(a) != badness(b) ? badness(a) > badness(b) : a->id > b->id;
  });
  if (worst.size() > static_cast<size_t>(std::max(0, o.worst))) worst.resize(static_cast<size_t>(std::max(0, o.worst)));
  Json examples = Json::array();
  for (const Row* r : worst) {
    Stmt t(db_,
           "SELECT primary_version, shadow_version, primary_replica, shadow_replica, target, request, primary_text, "
           "primary_finish, shadow_text, shadow_finish, shadow_status, shadow_error FROM shadow_pairs WHERE id = ?");
    t.integer(1, r->id);
    if (!t.ok() || t.step() != SQLITE_ROW) continue;  // trimmed meanwhile
    Json e = {{"id", r->id},
              {"at", r->at},
              {"primary_version", t.col_text(0)},
              {"shadow_version", t.col_text(1)},
              {"primary_replica", t.col_text(2)},
              {"shadow_replica", t.col_text(3)},
              {"target", t.col_text(4)},
              {"request", t.col_text(5)},
              {"primary", {{"text", t.col_text(6)}, {"finish_reason", t.col_text(7)}}},
              {"shadow", {{"text", t.col_text(8)}, {"finish_reason", t.col_text(9)}, {"status", t.col_int(10)}}}};
    if (!r->answered) e["shadow"]["error"] = t.col_text(11);
    e["comparison"] = r->c;
    examples.push_back(std::move(e));
  }
  report["worst"] = examples;
  return report;
}

}  // namespace sluice::router
