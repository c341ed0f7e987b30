#include "cli/rollout_eval.h"

#include "common/http_client.h"
#include "eval/compare.h"
#include "eval/runner.h"
#include "eval/store.h"
#include "eval/suite.h"

namespace sluice::cli {
namespace {

// The model a replica serves (the first of GET /models): versions may name their models apart,
// and each replica is asked for its own.
Result<std::string> served_model(const router::EvalEndpoint& e) {
  auto url = http::parse_url(e.url);
  if (!url) return Error(url.error());
  http::HttpOptions options;
  options.request_timeout = std::chrono::seconds(30);
  http::HttpRequest req{.target = url->target("/models")};
  if (!e.api_key.empty()) req.headers.push_back({"Authorization", "Bearer " + e.api_key});
  auto r = http::fetch(*url, req, options);
  if (!r) return Error(r.error().to_status());
  auto listed = http::first_listed_model(r->body);
  if (!listed) return Error("{}/models lists no model", e.url);
  return listed->id;
}

// One run of the suite against a replica (with its key, and no other); its id and rows.
Result<std::pair<int64_t, std::vector<eval::ResultRow>>> run_against(const eval::Suite& suite, eval::Store& store,
                                                                     const router::EvalEndpoint& e) {
  eval::RunOptions ro;
  ro.base_url = e.url;
  ro.api_key = e.api_key;
  SLUICE_ASSIGN_OR_RETURN(ro.model, served_model(e));
  ro.jobs = 4;
  SLUICE_ASSIGN_OR_RETURN(eval::Plan plan, eval::plan_run(suite, ro));
  SLUICE_ASSIGN_OR_RETURN(eval::RunOutcome outcome, eval::execute_run(plan, store, ro));
  if (outcome.num_errors > 0) {
    return Error("{} of {} samples from {} got no answer (first: {})", outcome.num_errors, outcome.num_samples, e.url,
                 outcome.first_error);
  }
  SLUICE_ASSIGN_OR_RETURN(std::vector<eval::ResultRow> rows, store.results(outcome.run_id));
  return std::pair{outcome.run_id, std::move(rows)};
}

}  // namespace

router::EvalGate make_rollout_eval_gate(std::string store_path) {
  return [store_path](const std::string& suite_path, double max_drop, const router::EvalEndpoint& stable,
                      const router::EvalEndpoint& candidate) -> Result<router::EvalVerdict> {
    SLUICE_ASSIGN_OR_RETURN(eval::Suite suite, eval::load_suite(suite_path));
    SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<eval::Store> store, eval::Store::open(store_path));
    SLUICE_ASSIGN_OR_RETURN(auto base, run_against(suite, *store, stable));
    SLUICE_ASSIGN_OR_RETURN(auto cand, run_against(suite, *store, candidate));
    eval::CompareOptions co;
    co.max_drop = max_drop;
    const eval::Comparison c = eval::compare_runs(base.first, base.second, cand.first, cand.second, co);
    router::EvalVerdict v;
    v.passed = c.verdict != "regressed" && c.verdict != "nothing compared";  // no evidence is no pass
    std::string said;
    nlohmann::json metrics = nlohmann::json::array();
    for (const eval::MetricResult& m : c.metrics) {
      metrics.push_back({{"metric", m.name}, {"stable", m.base}, {"candidate", m.cand}, {"p_adjusted", m.p_adjusted},
                         {"verdict", m.verdict}, {"pass_to_fail", m.pass_to_fail}, {"fail_to_pass", m.fail_to_pass}});
      if (m.name == "pass rate" || m.verdict == "regressed") {
        said += fmt::format("{}{} {:.1f}% vs stable's {:.1f}% ({}, p {:.4f}, {} pass->fail)", said.empty() ? "" : "; ",
                            m.name, 100 * m.cand, 100 * m.base, m.verdict, m.p_adjusted, m.pass_to_fail);
      }
    }
    v.reason = fmt::format("{} over {} items: {}", c.verdict, c.items.size(), said);
    v.metrics = {{"eval", {{"suite", suite_path}, {"stable_run", base.first}, {"candidate_run", cand.first},
                           {"verdict", c.verdict}, {"metrics", metrics}}}};
    return v;
  };
}

}  // namespace sluice::cli
