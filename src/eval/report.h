// Reports of eval runs and comparisons: a terminal table, JSON, JUnit XML (one testcase per
// item; regressions as failures), Markdown for a pull-request comment, and a self-contained
// HTML page with SVG charts (report_html.cc).
#pragma once

#include <string>
#include <vector>

#include "eval/compare.h"
#include "eval/runner.h"
#include "eval/store.h"

namespace sluice::eval {

// A run's summary for a terminal: counts, pass rate, named metrics, what was not run.
std::string run_text(const RunRow& run, const std::vector<ResultRow>& rows, const std::vector<std::string>& not_run);
Json run_json(const RunRow& run, const std::vector<ResultRow>& rows);
// JUnit XML of a run: one testcase per sample row; a failed grade is a <failure>, a missing
// answer an <error>.
std::string run_junit(const RunRow& run, const std::vector<ResultRow>& rows);

// A comparison: the changed items first (pass->fail, then fail->pass, both outputs), then the
// metrics with their tests and verdicts.
std::string compare_text(const Comparison& c, int32_t max_items = 20);
Json compare_json(const Comparison& c);
// JUnit: one testcase per joined item; pass->fail items are failures, with both outputs.
std::string compare_junit(const Comparison& c);
// Markdown for a pull-request comment: the verdict, the metrics table, the regressed items.
std::string compare_markdown(const Comparison& c, int32_t max_items = 20);
// A metric's value and difference as every report shows them: a rate in percent and points
// ("75.0%", "-25.0pp"), a score to 4 decimals.
std::string metric_value_text(const MetricResult& m, double value);
std::string metric_diff_text(const MetricResult& m);
// Its minimum detectable effect, shown the same way; ">100%" where the suite is too small to
// see any drop of a rate.
std::string mde_text(const MetricResult& m);
// A self-contained HTML page (no external scripts or fonts): the verdict and metrics, an SVG
// chart of the suite's scores over its runs, the per-item diff table.
std::string compare_html(const Comparison& c, const std::vector<RunRow>& history);

// Escapes for XML/HTML text and attributes.
std::string xml_escape(std::string_view s);

}  // namespace sluice::eval
