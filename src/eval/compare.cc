#include "eval/compare.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "eval/stats.h"

namespace sluice::eval {
namespace {

// One run's view of an item: its samples folded.
struct Item {
  const ResultRow* first = nullptr;
  int64_t samples = 0, passed = 0;
  double score = 0;
  std::string error;
  std::map<std::string, std::pair<double, int64_t>> metrics;  // named metric -> (sum, count)
  std::string kind;             // "test", "multiple-choice", "perplexity"
  bool pass = false;
  bool flaky = false;
};

std::map<std::string, Item> fold(const std::vector<ResultRow>& rows) {
  std::map<std::string, Item> items;
  for (const ResultRow& r : rows) {
    Item& it = items[r.item_key];
    if (!it.first) it.first = &r;
    ++it.samples;
    it.passed += r.pass;
    it.score += r.score;
    if (!r.error.empty() && it.error.empty()) it.error = r.error;
    it.kind = r.grades.is_object() && r.grades.contains("kind") ? r.grades["kind"].get<std::string>() : "test";
    if (r.grades.is_object() && r.grades.contains("assertions")) {
      for (const Json& a : r.grades["assertions"]) {
        const std::string m = a.value("metric", std::string());
        if (m.empty()) continue;
        auto& [sum, count] = it.metrics[m];
        sum += a.value("score", 0.0);
        ++count;
      }
    }
  }
  for (auto& [key, it] : items) {
    const double fraction = it.first->grades.is_object() ? it.first->grades.value("pass_fraction", 1.0) : 1.0;
    it.score /= static_cast<double>(it.samples);
    it.pass = item_passes(it.passed, it.samples, fraction, !it.error.empty());
    it.flaky = it.passed > 0 && it.passed < it.samples;
  }
  return items;
}

double sd(const std::vector<double>& x) {
  if (x.size() < 2) return 0;
  const double m = std::accumulate(x.begin(), x.end(), 0.0) / static_cast<double>(x.size());
  double ss = 0;
  for (double v : x) ss += (v - m) * (v - m);
  return std::sqrt(ss / static_cast<double>(x.size() - 1));
}

}  // namespace

bool item_passes(int64_t passed, int64_t samples, double pass_fraction, bool any_error) {
  return !any_error && static_cast<double>(passed) >= pass_fraction * static_cast<double>(samples) - 1e-9;
}

Comparison compare_runs(int64_t base_run, const std::vector<ResultRow>& base_rows, int64_t cand_run,
                        const std::vector<ResultRow>& cand_rows, const CompareOptions& options) {
  Comparison c;
  c.base_run = base_run;
  c.cand_run = cand_run;
  c.aa = options.aa;
  const std::map<std::string, Item> base = fold(base_rows), cand = fold(cand_rows);
  for (const auto& [k, v] : base) c.only_base += !cand.contains(k);
  for (const auto& [k, v] : cand) c.only_cand += !base.contains(k);

  // Paired observations per metric.
  struct Pairs {
    bool binary = false;
    std::vector<double> b, a;  // baseline, candidate
  };
  std::map<std::string, Pairs> pairs;
  std::vector<std::string> order;  // metric names in first-seen order
  auto add = [&](const std::string& name, bool binary, double b, double a) {
    auto [it, inserted] = pairs.try_emplace(name);
    if (inserted) order.push_back(name);
    it->second.binary = binary;
    it->second.b.push_back(b);
    it->second.a.push_back(a);
  };
  for (const auto& [key, b] : base) {
    auto ci = cand.find(key);
    if (ci == cand.end()) continue;
    const Item& a = ci->second;
    ItemDiff d;
    d.key = key;
    d.provider = b.first->provider;
    d.prompt = b.first->prompt;
    d.test = b.first->test;
    d.vars = b.first->vars;
    d.base_output = b.first->output;
    d.cand_output = a.first->output;
    d.base_pass = b.pass, d.cand_pass = a.pass;
    d.base_score = b.score, d.cand_score = a.score;
    d.base_error = b.error, d.cand_error = a.error;
    d.flaky = b.flaky || a.flaky || (options.aa && (b.pass != a.pass || b.first->output != a.first->output));
    c.num_flaky += d.flaky;
    c.items.push_back(std::move(d));
    if (b.kind == "test") {
      add("pass rate", true, b.pass, a.pass);
      add("score", false, b.score, a.score);
      for (const auto& [m, sc] : b.metrics) {
        auto am = a.metrics.find(m);
        if (am == a.metrics.end()) continue;
        add(m, false, sc.first / static_cast<double>(sc.second), am->second.first / static_cast<double>(am->second.second));
      }
    } else if (b.kind == "multiple-choice") {
      add("accuracy " + b.first->prompt, true, b.pass, a.pass);
    } else {
      add("logprob " + b.first->prompt, false, b.score, a.score);
    }
  }
  // The score metric says nothing the pass rate does not when every score is 0 or 1.
  if (auto it = pairs.find("score"); it != pairs.end()) {
    auto binary = [](const std::vector<double>& v) { return std::all_of(v.begin(), v.end(), [](double x) { return x == 0 || x == 1; }); };
    if (binary(it->second.b) && binary(it->second.a)) {
      pairs.erase(it);
      order.erase(std::find(order.begin(), order.end(), "score"));
    }
  }

  std::vector<double> ps;
  for (const std::string& name : order) {
    const Pairs& pr = pairs.at(name);
    MetricResult m;
    m.name = name;
    m.n = static_cast<int64_t>(pr.b.size());
    const double n = static_cast<double>(m.n);
    m.base = std::accumulate(pr.b.begin(), pr.b.end(), 0.0) / n;
    m.cand = std::accumulate(pr.a.begin(), pr.a.end(), 0.0) / n;
    m.diff = m.cand - m.base;
    std::vector<double> diffs(pr.b.size());
    for (size_t i = 0; i < diffs.size(); ++i) diffs[i] = pr.a[i] - pr.b[i];
    if (pr.binary) {
      m.test = "mcnemar";
      for (size_t i = 0; i < pr.b.size(); ++i) {
        m.pass_to_fail += pr.b[i] > pr.a[i];
        m.fail_to_pass += pr.b[i] < pr.a[i];
      }
      m.p = mcnemar_exact_p(m.pass_to_fail, m.fail_to_pass);
      m.ci_lo = m.ci_hi = m.diff;
      // The fewest one-way flips that could be significant at all, and no less than the spread
      // of the paired differences allows: many flips both ways hide a real drop as well as a
      // small suite does.
      m.mde = std::max(static_cast<double>(mcnemar_min_discordant(options.alpha)) / n,
                       score_mde(sd(diffs), m.n, options.alpha));
    } else {
      m.test = "bootstrap";
      const BootstrapResult br = paired_bootstrap(diffs, options.resamples, 1 - options.alpha, options.seed);
      m.p = br.p;
      m.ci_lo = br.lo, m.ci_hi = br.hi;
      m.mde = score_mde(sd(diffs), m.n, options.alpha);
      for (double d : diffs) m.pass_to_fail += d < 0, m.fail_to_pass += d > 0;
    }
    ps.push_back(m.p);
    c.metrics.push_back(std::move(m));
  }
  const std::vector<double> adjusted = holm(ps);
  bool any_regressed = false, any_improved = false, any_inconclusive = false;
  for (size_t i = 0; i < c.metrics.size(); ++i) {
    MetricResult& m = c.metrics[i];
    m.p_adjusted = adjusted[i];
    c.noise_floor = std::max(c.noise_floor, std::fabs(m.diff));
    const bool changed = m.pass_to_fail + m.fail_to_pass > 0;
    const bool significant = m.p_adjusted < options.alpha;
    if (!changed) {
      m.verdict = "no change";
    } else if (significant && m.diff < -options.max_drop) {
      m.verdict = "regressed";
    } else if (significant && m.diff > 0) {
      m.verdict = "improved";
    } else if (m.mde <= options.max_drop || (significant && m.diff >= -options.max_drop)) {
      m.verdict = "no change";
    } else {
      m.verdict = "inconclusive";
    }
    any_regressed |= m.verdict == "regressed";
    any_improved |= m.verdict == "improved";
    any_inconclusive |= m.verdict == "inconclusive";
  }
  c.verdict = any_regressed ? "regressed" : any_improved ? "improved" : any_inconclusive ? "inconclusive" : "no change";
  // No item in both runs (another suite, a run that stopped before any answer): nothing was
  // compared, which is no evidence of "no change".
  if (c.items.empty()) c.verdict = "nothing compared";
  // Pass -> fail first, then fail -> pass, then the rest (in key order).
  auto rank = [](const ItemDiff& d) { return d.base_pass && !d.cand_pass ? 0 : !d.base_pass && d.cand_pass ? 1 : 2; };
  std::stable_sort(c.items.begin(), c.items.end(), [&](const ItemDiff& x, const ItemDiff& y) { return rank(x) < rank(y); });
  return c;
}

}  // namespace sluice::eval
