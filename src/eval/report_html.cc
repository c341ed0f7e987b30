// The HTML report of a comparison: one self-contained page (inline CSS and SVG, no scripts,
// no fonts from elsewhere), so a CI artifact opens anywhere.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "eval/report.h"

namespace sluice::eval {
namespace {

// Pass rate (and score) of each finished run over time: a line per series, a dot per run.
std::string history_svg(const std::vector<RunRow>& history) {
  std::vector<const RunRow*> runs;
  for (const RunRow& r : history) {
    if (r.summary.is_object() && r.summary.contains("pass_rate")) runs.push_back(&r);
  }
  std::reverse(runs.begin(), runs.end());  // oldest first
  const int w = 720, h = 240, left = 48, right = 16, top = 16, bottom = 40;
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" id=\"history\" width=\"{}\" height=\"{}\" "
      "viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"pass rate and score per run\">\n",
      w, h, w, h);
  for (int i = 0; i <= 4; ++i) {
    const double y = top + (h - top - bottom) * (1 - i / 4.0);
    svg += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>"
                       "<text x=\"{}\" y=\"{:.1f}\" font-size=\"11\" text-anchor=\"end\">{}%</text>\n",
                       left, y, w - right, y, left - 6, y + 4, i * 25);
  }
  if (runs.empty()) {
    svg += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"13\">no finished runs of this suite yet</text>\n", left + 10, h / 2);
    return svg + "</svg>\n";
  }
  auto x_of = [&](size_t i) {
    return runs.size() == 1 ? (left + w - right) / 2.0
                            : left + (w - left - right) * static_cast<double>(i) / static_cast<double>(runs.size() - 1);
  };
  auto y_of = [&](double v) { return top + (h - top - bottom) * (1 - std::clamp(v, 0.0, 1.0)); };
  const std::pair<const char*, const char*> series[] = {{"pass_rate", "#2a6fdb"}, {"score", "#e0862a"}};
  for (const auto& [key, color] : series) {
    std::string points;
    for (size_t i = 0; i < runs.size(); ++i) {
      const double v = runs[i]->summary.value(key, 0.0);
      points += fmt::format("{:.1f},{:.1f} ", x_of(i), y_of(v));
      svg += fmt::format("<circle class=\"point\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"{}\"><title>run {} {}: "
                         "{:.3f}</title></circle>\n",
                         x_of(i), y_of(v), color, runs[i]->id, key, v);
    }
    // The score is dashed: where it equals the pass rate (0/1 assertions) both still show.
    svg += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{} points=\"{}\"/>\n", color,
                       std::string_view(key) == "score" ? " stroke-dasharray=\"7 4\"" : "", points);
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    if (runs.size() > 12 && i % (runs.size() / 12 + 1) != 0) continue;
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\">#{}</text>\n", x_of(i),
                       h - bottom + 16, runs[i]->id);
  }
  svg += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\" fill=\"#2a6fdb\">pass rate</text>"
                     "<text x=\"{}\" y=\"{}\" font-size=\"11\" fill=\"#e0862a\">score</text>\n",
                     left, h - 6, left + 70, h - 6);
  return svg + "</svg>\n";
}

// Baseline vs candidate per metric, as paired bars.
std::string metrics_svg(const Comparison& c) {
  const int row = 26, w = 720, label_w = 200;
  const int h = static_cast<int>(c.metrics.size()) * row + 30;
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" id=\"metrics\" width=\"{}\" height=\"{}\" "
      "viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"metrics, baseline and candidate\">\n",
      w, h, w, h);
  double max = 1e-9;
  for (const MetricResult& m : c.metrics) max = std::max({max, std::fabs(m.base), std::fabs(m.cand)});
  const double scale = (w - label_w - 80) / max;
  for (size_t i = 0; i < c.metrics.size(); ++i) {
    const MetricResult& m = c.metrics[i];
    const int y = static_cast<int>(i) * row + 6;
    const char* color = m.verdict == "regressed" ? "#c62828" : m.verdict == "improved" ? "#2e7d32" : "#888";
    svg += fmt::format("<text x=\"0\" y=\"{}\" font-size=\"12\">{}</text>\n", y + 14, xml_escape(m.name.substr(0, 28)));
    svg += fmt::format("<rect class=\"bar\" x=\"{}\" y=\"{}\" width=\"{:.1f}\" height=\"9\" fill=\"#bbb\"><title>baseline "
                       "{:.4f}</title></rect>\n",
                       label_w, y + 2, std::fabs(m.base) * scale, m.base);
    svg += fmt::format("<rect class=\"bar\" x=\"{}\" y=\"{}\" width=\"{:.1f}\" height=\"9\" fill=\"{}\"><title>candidate "
                       "{:.4f}</title></rect>\n",
                       label_w, y + 12, std::fabs(m.cand) * scale, color, m.cand);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" font-size=\"11\">{}</text>\n",
                       label_w + std::max(std::fabs(m.base), std::fabs(m.cand)) * scale + 6, y + 14, xml_escape(m.verdict));
  }
  svg += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\" fill=\"#777\">grey: baseline; coloured: candidate</text>\n",
                     label_w, h - 4);
  return svg + "</svg>\n";
}

}  // namespace

std::string compare_html(const Comparison& c, const std::vector<RunRow>& history) {
  std::string html = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>sluice eval: {}</title>\n<style>\n"
      "body{{font-family:sans-serif;margin:24px;color:#222}} table{{border-collapse:collapse;margin:12px 0}}"
      "td,th{{border:1px solid #ccc;padding:4px 8px;font-size:13px;vertical-align:top}} th{{background:#f3f3f3}}"
      ".regressed{{color:#c62828;font-weight:bold}} .improved{{color:#2e7d32;font-weight:bold}}"
      "tr.p2f{{background:#fdecea}} tr.f2p{{background:#eaf6ea}} pre{{margin:0;white-space:pre-wrap;max-width:420px}}\n"
      "</style></head><body>\n<h1>sluice eval: <span id=\"verdict\" class=\"{}\">{}</span></h1>\n"
      "<p>Candidate run {} against baseline run {}{}.</p>\n",
      xml_escape(c.verdict), c.verdict == "nothing compared" ? "regressed" : xml_escape(c.verdict),  // class: one word
      xml_escape(c.verdict), c.cand_run, c.base_run,
      c.aa ? " (A/A: one configuration twice; differences are noise)" : "");
  if (c.only_base || c.only_cand) {
    html += fmt::format("<p id=\"not-compared\">Not compared: items only in the baseline {}, only in the candidate {}.</p>\n",
                        c.only_base, c.only_cand);
  }
  html += "<h2>Metrics</h2>\n<table id=\"metric-table\"><tr><th>metric</th><th>items</th><th>baseline</th><th>candidate</th>"
          "<th>diff</th><th>p (Holm)</th><th>test</th><th>MDE</th><th>verdict</th></tr>\n";
  for (const MetricResult& m : c.metrics) {
    html += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.4f}</td><td>{}</td>"
        "<td>{}</td><td class=\"{}\">{}</td></tr>\n",
        xml_escape(m.name), m.n, metric_value_text(m, m.base), metric_value_text(m, m.cand), metric_diff_text(m),
        m.p_adjusted, m.test, xml_escape(mde_text(m)), xml_escape(m.verdict), xml_escape(m.verdict));
  }
  html += "</table>\n" + metrics_svg(c);
  html += "<h2>Scores over runs</h2>\n" + history_svg(history);
  html += "<h2>Items</h2>\n<table id=\"items\"><tr><th>change</th><th>provider</th><th>test</th><th>baseline</th>"
          "<th>candidate</th></tr>\n";
  for (const ItemDiff& d : c.items) {
    const bool p2f = d.base_pass && !d.cand_pass, f2p = !d.base_pass && d.cand_pass;
    const char* change = p2f ? "pass &rarr; fail" : f2p ? "fail &rarr; pass" : d.base_pass ? "pass" : "fail";
    html += fmt::format("<tr class=\"{}\"><td>{}{}</td><td>{}</td><td>{}</td><td><pre>{}</pre></td><td><pre>{}</pre></td></tr>\n",
                        p2f ? "p2f" : f2p ? "f2p" : "same", change, d.flaky ? " (flaky)" : "", xml_escape(d.provider),
                        xml_escape(d.test), xml_escape(d.base_output.substr(0, 2000)),
                        xml_escape(d.cand_error.empty() ? d.cand_output.substr(0, 2000) : "error: " + d.cand_error));
  }
  html += "</table>\n</body></html>\n";
  return html;
}

}  // namespace sluice::eval
