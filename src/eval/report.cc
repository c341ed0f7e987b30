#include "eval/report.h"

#include <map>

#include <fmt/format.h>

namespace sluice::eval {
namespace {

std::string one_line(std::string_view s, size_t max) {
  std::string out;
  for (char c : s) {
    if (out.size() >= max) {
      out += "...";
      break;
    }
    out += c == '\n' ? ' ' : c == '\r' || c == '\t' ? ' ' : c;
  }
  return out;
}

std::string pct(double x) { return fmt::format("{:.1f}%", 100 * x); }

std::string signed_num(double x, bool percent) {
  return percent ? fmt::format("{:+.1f}pp", 100 * x) : fmt::format("{:+.4f}", x);
}

// A GitHub-flavoured Markdown table cell. The table is split at unescaped pipes and `\|` is
// then unescaped everywhere, code spans included, so a pipe is always `\|`. In a code span
// (code = true) every other character is literal, a backtick aside (it would end the span). In
// text, the characters Markdown would read as markup are backslash-escaped, the backslash
// first: `a\|b` must show as written, not as `a|b`.
std::string md_cell(std::string_view s, size_t max = 120, bool code = false) {
  std::string out;
  for (char c : one_line(s, max)) {
    if (c == '|') out += "\\|";
    else if (c == '`') out += code ? "'" : "\\`";
    else if (!code && std::string_view("\\*_[]<>#~&").find(c) != std::string_view::npos) (out += '\\') += c;
    else out += c;
  }
  return out;
}

bool is_rate(const MetricResult& m) { return m.test == "mcnemar"; }

}  // namespace

std::string metric_value_text(const MetricResult& m, double value) {
  return is_rate(m) ? pct(value) : fmt::format("{:.4f}", value);
}

std::string mde_text(const MetricResult& m) { return is_rate(m) && m.mde > 1 ? ">100%" : metric_value_text(m, m.mde); }

std::string metric_diff_text(const MetricResult& m) { return signed_num(m.diff, is_rate(m)); }

std::string xml_escape(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default:
        // Control characters are not allowed in XML 1.0 (but tab, newline, carriage return).
        if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') out += fmt::format("\\x{:02x}", c);
        else out += static_cast<char>(c);
    }
  }
  return out;
}

std::string run_text(const RunRow& run, const std::vector<ResultRow>& rows, const std::vector<std::string>& not_run) {
  std::string out = fmt::format("run {} of {} ({}): {}\n", run.id, run.suite, run.started, run.status);
  const Json& s = run.summary;
  if (s.is_object()) {
    out += fmt::format("  {} items, {} samples: {} passed, {} failed, {} without an answer\n", s.value("items", 0),
                       s.value("samples", 0), s.value("passed", 0), s.value("failed", 0), s.value("errors", 0));
    if (s.contains("item_pass_rate")) {
      // With repeats: items (what compare's "pass rate" counts) and samples apart.
      out += fmt::format("  pass rate {} of items (passFraction of their samples), {} of samples   score {:.3f}",
                         pct(s["item_pass_rate"]), pct(s["pass_rate"]), s.value("score", 0.0));
    } else if (s.contains("pass_rate")) {
      out += fmt::format("  pass rate {}   score {:.3f}", pct(s["pass_rate"]), s.value("score", 0.0));
    }
    if (s.contains("pass_rate")) {
      // With likelihood tasks beside the tests, say what the rate counts (their items are in
      // the metrics below, not in it).
      const int64_t test_samples = s.value("test_samples", int64_t{-1});
      if (test_samples >= 0 && test_samples != s.value("samples", int64_t{0})) {
        out += fmt::format("   (of the {} test samples; likelihood items: their metrics below)", test_samples);
      }
      out += "\n";
    }
    for (const auto& [key, v] : s.items()) {
      if (key.starts_with("pass@") || key.starts_with("pass^")) out += fmt::format("  {:<8} {:.3f}\n", key, v.get<double>());
    }
    if (s.contains("metrics")) {
      for (const auto& [name, v] : s["metrics"].items()) out += fmt::format("  {:<28} {:.4f}\n", name, v.get<double>());
    }
    out += fmt::format("  fingerprint {}\n", run.fingerprint);
  }
  int shown = 0;
  for (const ResultRow& r : rows) {
    if (r.pass && r.error.empty()) continue;
    if (shown++ == 10) {
      out += "  ...\n";
      break;
    }
    std::string why = r.error;
    if (why.empty() && r.grades.is_object() && r.grades.contains("assertions")) {
      for (const Json& a : r.grades["assertions"]) {
        if (!a.value("pass", true)) {
          why = fmt::format("{}: {}", a.value("type", std::string()), a.value("reason", std::string()));
          break;
        }
      }
    }
    if (why.empty() && r.grades.is_object() && r.grades.value("kind", std::string()) == "multiple-choice") {
      why = fmt::format("the most likely choice is #{}, the gold one #{} (counting from 0)", r.grades.value("pred", -1),
                        r.grades.value("gold", -1));
    }
    out += fmt::format("  FAIL [{}] {} #{}: {}\n       output: {}\n", r.provider, one_line(r.test, 60), r.sample,
                       one_line(why, 160), one_line(r.output, 160));
  }
  for (const std::string& n : not_run) out += "  not run: " + n + "\n";
  return out;
}

Json run_json(const RunRow& run, const std::vector<ResultRow>& rows) {
  Json results = Json::array();
  for (const ResultRow& r : rows) {
    results.push_back({{"item", r.item_key}, {"sample", r.sample}, {"provider", r.provider}, {"prompt", r.prompt},
                       {"test", r.test}, {"vars", r.vars}, {"output", r.output}, {"pass", r.pass}, {"score", r.score},
                       {"grades", r.grades}, {"latency_ms", r.latency_ms}, {"system_fingerprint", r.system_fingerprint},
                       {"error", r.error.empty() ? Json(nullptr) : Json(r.error)}, {"request", r.request},
                       {"response", r.response}});
  }
  return {{"run", {{"id", run.id}, {"suite", run.suite}, {"suite_path", run.suite_path}, {"fingerprint", run.fingerprint},
                   {"started", run.started}, {"finished", run.finished}, {"status", run.status}, {"options", run.options},
                   {"summary", run.summary}}},
          {"results", results}};
}

std::string run_junit(const RunRow& run, const std::vector<ResultRow>& rows) {
  int failures = 0, errors = 0;
  std::string cases;
  for (const ResultRow& r : rows) {
    cases += fmt::format("    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3f}\">\n", xml_escape(r.provider + "." + r.prompt),
                         xml_escape(fmt::format("{} #{}", r.test, r.sample)), r.latency_ms / 1000);
    if (!r.error.empty()) {
      ++errors;
      cases += fmt::format("      <error message=\"{}\"/>\n", xml_escape(one_line(r.error, 300)));
    } else if (!r.pass) {
      ++failures;
      cases += fmt::format("      <failure message=\"score {:.3f}\">{}</failure>\n", r.score,
                           xml_escape("output: " + r.output + "\ngrades: " + r.grades.dump(2)));
    }
    cases += "    </testcase>\n";
  }
  return fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" "
      "errors=\"{}\">\n{}  </testsuite>\n</testsuites>\n",
      xml_escape(fmt::format("sluice eval run {}: {}", run.id, run.suite)), rows.size(), failures, errors, cases);
}

std::string compare_text(const Comparison& c, int32_t max_items) {
  std::string out = fmt::format("compare run {} (candidate) with run {} (baseline){}: {}\n", c.cand_run, c.base_run,
                                c.aa ? " as A/A (one configuration: differences are noise)" : "", c.verdict);
  int shown = 0;
  for (const ItemDiff& d : c.items) {
    const bool p2f = d.base_pass && !d.cand_pass, f2p = !d.base_pass && d.cand_pass;
    if (!p2f && !f2p) continue;
    if (shown++ == max_items) {
      out += "  ...\n";
      break;
    }
    out += fmt::format("  {} [{}] {}{}\n    baseline:  {}\n    candidate: {}\n", p2f ? "pass -> FAIL" : "fail -> pass",
                       d.provider, one_line(d.test, 70), d.flaky ? " (flaky)" : "", one_line(d.base_output, 150),
                       one_line(d.cand_error.empty() ? d.cand_output : "error: " + d.cand_error, 150));
  }
  out += fmt::format("  {:<24} {:>5} {:>9} {:>9} {:>10} {:>9} {:>9} {:>8}  {}\n", "metric", "items", "baseline", "candidate",
                     "diff", "p (Holm)", "test", "MDE", "verdict");
  for (const MetricResult& m : c.metrics) {
    const bool rate = is_rate(m);
    out += fmt::format("  {:<24} {:>5} {:>9} {:>9} {:>10} {:>9.4f} {:>9} {:>8}  {}\n", one_line(m.name, 24), m.n,
                       metric_value_text(m, m.base), metric_value_text(m, m.cand), metric_diff_text(m), m.p_adjusted,
                       m.test, mde_text(m), m.verdict);
    if (!rate && m.pass_to_fail + m.fail_to_pass > 0) {
      out += fmt::format("  {:<24} 95% interval of the difference [{:+.4f}, {:+.4f}]\n", "", m.ci_lo, m.ci_hi);
    }
  }
  if (c.only_base || c.only_cand) {
    out += fmt::format("  not compared: items only in the baseline {}, only in the candidate {}\n", c.only_base, c.only_cand);
  }
  if (c.num_flaky) out += fmt::format("  {} flaky items (their samples or runs disagree)\n", c.num_flaky);
  if (c.aa) out += fmt::format("  noise floor: the largest difference between the two runs is {:.4f}\n", c.noise_floor);
  return out;
}

Json compare_json(const Comparison& c) {
  Json metrics = Json::array();
  for (const MetricResult& m : c.metrics) {
    metrics.push_back({{"name", m.name}, {"test", m.test}, {"items", m.n}, {"baseline", m.base}, {"candidate", m.cand},
                       {"diff", m.diff}, {"p", m.p}, {"p_adjusted", m.p_adjusted}, {"ci", {m.ci_lo, m.ci_hi}},
                       {"mde", m.mde}, {"worse", m.pass_to_fail}, {"better", m.fail_to_pass}, {"verdict", m.verdict}});
  }
  Json items = Json::array();
  for (const ItemDiff& d : c.items) {
    if (d.base_pass == d.cand_pass && d.base_score == d.cand_score && !d.flaky) continue;
    items.push_back({{"item", d.key}, {"provider", d.provider}, {"prompt", d.prompt}, {"test", d.test}, {"vars", d.vars},
                     {"baseline", {{"pass", d.base_pass}, {"score", d.base_score}, {"output", d.base_output}}},
                     {"candidate", {{"pass", d.cand_pass}, {"score", d.cand_score}, {"output", d.cand_output},
                                    {"error", d.cand_error.empty() ? Json(nullptr) : Json(d.cand_error)}}},
                     {"flaky", d.flaky}});
  }
  return {{"baseline_run", c.base_run}, {"candidate_run", c.cand_run}, {"verdict", c.verdict}, {"aa", c.aa},
          {"metrics", metrics}, {"changed_items", items}, {"only_baseline", c.only_base}, {"only_candidate", c.only_cand},
          {"flaky", c.num_flaky}, {"noise_floor", c.noise_floor}};
}

std::string compare_junit(const Comparison& c) {
  int failures = 0;
  std::string cases;
  for (const ItemDiff& d : c.items) {
    cases += fmt::format("    <testcase classname=\"{}\" name=\"{}\">\n", xml_escape(d.provider + "." + d.prompt), xml_escape(d.test));
    if (d.base_pass && !d.cand_pass) {
      ++failures;
      cases += fmt::format("      <failure message=\"regressed: passed in the baseline, fails now\">{}</failure>\n",
                           xml_escape("baseline: " + d.base_output + "\ncandidate: " +
                                      (d.cand_error.empty() ? d.cand_output : "error: " + d.cand_error)));
    }
    cases += "    </testcase>\n";
  }
  int errors = 0;
  if (c.verdict == "nothing compared") {  // no evidence is no pass: an error case says why
    ++errors;
    cases += fmt::format("    <testcase classname=\"sluice.eval\" name=\"compare\">\n      <error message=\"nothing "
                         "compared: no item is in both runs ({} only in the baseline, {} only in the candidate)\"/>\n"
                         "    </testcase>\n",
                         c.only_base, c.only_cand);
  }
  return fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" "
      "errors=\"{}\">\n{}  </testsuite>\n</testsuites>\n",
      xml_escape(fmt::format("sluice eval compare {} vs {}: {}", c.cand_run, c.base_run, c.verdict)),
      c.items.size() + static_cast<size_t>(errors), failures, errors, cases);
}

std::string compare_markdown(const Comparison& c, int32_t max_items) {
  const char* icon = c.verdict == "regressed" || c.verdict == "nothing compared" ? "❌"
                     : c.verdict == "inconclusive"                                ? "⚠️"
                                                                                  : "✅";
  std::string out = fmt::format("### {} sluice eval: **{}**\n\nCandidate run {} against baseline run {}{}.\n\n", icon,
                                c.verdict, c.cand_run, c.base_run, c.aa ? " (A/A: one configuration twice)" : "");
  out += "| metric | items | baseline | candidate | diff | p (Holm) | test | MDE | verdict |\n";
  out += "|---|---:|---:|---:|---:|---:|---|---:|---|\n";
  for (const MetricResult& m : c.metrics) {
    out += fmt::format("| {} | {} | {} | {} | {} | {:.4f} | {} | {} | {} |\n", md_cell(m.name), m.n,
                       metric_value_text(m, m.base), metric_value_text(m, m.cand), metric_diff_text(m), m.p_adjusted,
                       m.test, mde_text(m), m.verdict);
  }
  int shown = 0;
  std::string rows;
  for (const ItemDiff& d : c.items) {
    if (!(d.base_pass && !d.cand_pass)) continue;
    if (shown++ == max_items) break;
    rows += fmt::format("| {} | {} | `{}` | `{}` |\n", md_cell(d.provider, 40), md_cell(d.test, 60),
                        md_cell(d.base_output, 120, /*code=*/true),
                        md_cell(d.cand_error.empty() ? d.cand_output : "error: " + d.cand_error, 120, /*code=*/true));
  }
  if (!rows.empty()) {
    out += "\n**Regressed items** (passed in the baseline, fail now):\n\n| provider | test | baseline | candidate |\n|---|---|---|---|\n" + rows;
  }
  if (c.num_flaky) out += fmt::format("\n{} flaky items (samples or runs disagree).\n", c.num_flaky);
  // A candidate that dropped items (a shorter suite, a provider removed) is said, not left out.
  if (c.only_base || c.only_cand) {
    out += fmt::format("\nNot compared: items only in the baseline {}, only in the candidate {}.\n", c.only_base, c.only_cand);
  }
  return out;
}

}  // namespace sluice::eval
