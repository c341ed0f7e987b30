#include "router/dashboard.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "common/html.h"

namespace sluice::router {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kStyle = R"css(
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
header{background:#1d2330;color:#fff;padding:12px 24px;display:flex;gap:24px;align-items:baseline}
header h1{font-size:18px;margin:0}header span{color:#aab3c5;font-size:13px}
main{padding:8px 24px 32px;max-width:1200px}
section{background:#fff;border:1px solid #dde1e8;border-radius:6px;margin:16px 0;padding:12px 16px}
h2{font-size:16px;margin:4px 0 10px}h3{font-size:14px;margin:14px 0 6px}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid #eceff3;vertical-align:top}
th{color:#5b6475;font-weight:600}
.num{text-align:right;font-variant-numeric:tabular-nums}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600}
.ok{background:#dff5e3;color:#17692c}.bad{background:#fde2e1;color:#9b1c1c}.warn{background:#fff1d6;color:#8a5a00}
.muted{color:#6b7485}.small{font-size:12px}
.pair{display:grid;grid-template-columns:1fr 1fr;gap:8px}
pre{white-space:pre-wrap;word-break:break-word;background:#f3f5f8;border:1px solid #e3e7ee;border-radius:4px;
padding:6px 8px;margin:2px 0;font-size:12px;max-height:220px;overflow:auto}
.example{border-top:1px solid #eceff3;padding-top:8px;margin-top:8px}
)css";

std::string num(const Json& v, const char* format = "{:.3f}", std::string_view none = "-") {
  return v.is_number() ? fmt::format(fmt::runtime(format), v.get<double>()) : std::string(none);
}

std::string pct(const Json& v) { return v.is_number() ? fmt::format("{:.1f}%", 100 * v.get<double>()) : "-"; }

std::string str(const Json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}

std::string ago(double then, double now) {
  const double s = std::max(0.0, now - then);
  if (s < 120) return fmt::format("{:.0f} s ago", s);
  if (s < 7200) return fmt::format("{:.0f} min ago", s / 60);
  return fmt::format("{:.1f} h ago", s / 3600);
}

std::string badge(std::string_view text, std::string_view kind) {
  return fmt::format("<span class=\"badge {}\">{}</span>", kind, html_escape(text));
}

// The newest kMaxRows of `rows` (a long rollout analyses every interval for hours); a table row
// of `columns` cells says how many earlier ones are left out.
constexpr size_t kMaxRows = 50;
Json latest(const Json& rows, std::string& out, int columns) {
  if (!rows.is_array() || rows.size() <= kMaxRows) return rows.is_array() ? rows : Json::array();
  out += fmt::format("<tr><td colspan={} class=muted>{} earlier not shown</td></tr>", columns, rows.size() - kMaxRows);
  Json kept = Json::array();
  for (size_t i = rows.size() - kMaxRows; i < rows.size(); ++i) kept.push_back(rows[i]);
  return kept;
}

std::string replicas_section(const DashboardData& d) {
  std::string out = "<section id=\"replicas\"><h2>Replicas</h2><table><tr><th>replica</th><th>version</th><th>state</th>"
                    "<th class=num>weight</th><th class=num>in flight</th><th class=num>waiting</th>"
                    "<th class=num>KV usage</th><th class=num>requests</th><th class=num>hit rate</th>"
                    "<th class=num>predicted</th></tr>";
  for (const Json& r : d.replicas) {
    const std::string state = str(r, "state");
    out += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td class=num>{}</td><td class=num>{}</td><td class=num>{}</td>"
        "<td class=num>{}</td><td class=num>{}</td><td class=num>{}</td><td class=num>{}</td></tr>",
        html_escape(str(r, "url")), html_escape(str(r, "version")), badge(state, state == "up" ? "ok" : "bad"),
        num(r.value("weight", Json()), "{:g}"), r.value("in_flight", 0), r.value("waiting", 0),
        pct(r.value("kv_usage", Json())), r.value("requests", 0), pct(r.value("hit_rate", Json())),
        pct(r.value("predicted_hit_rate", Json())));
  }
  if (d.replicas.empty()) out += "<tr><td colspan=10 class=muted>no replica</td></tr>";
  return out + "</table></section>";
}

std::string rollout_section(const DashboardData& d) {
  std::string out = "<section id=\"rollout\"><h2>Rollout</h2>";
  const Json& r = d.rollout;
  if (!r.is_object()) return out + "<p class=muted>No rollout has been started.</p></section>";
  const std::string phase = str(r, "phase");
  const std::string kind = phase == "promoted" ? "ok" : phase == "aborted" ? "bad" : "warn";
  const double weight = r.value("weight", 0.0);
  const int64_t steps = r.contains("spec") && r["spec"].contains("steps") ? static_cast<int64_t>(r["spec"]["steps"].size()) : 0;
  // Steps are numbered from 0, as in the admin API, the log and `route rollout status`, and in
  // the tables below.
  const int64_t step = r.value("step", int64_t{0});
  const std::string at = steps == 0      ? std::string("(no steps)")
                         : step >= steps ? fmt::format("past the last of steps 0-{}", steps - 1)
                                         : fmt::format("at step {} of steps 0-{}", step, steps - 1);
  out += fmt::format("<p><b>{}</b> {} &rarr; {} {} {}, failed analyses {}</p>", html_escape(str(r, "name")),
                     html_escape(str(r, "stable")), html_escape(str(r, "candidate")), badge(phase, kind), at,
                     r.value("failed_analyses", 0));
  // The split as a bar: stable's share, then the candidate's.
  const double w = 600 * weight / 100;
  out += fmt::format(
      "<svg width=\"640\" height=\"34\" role=\"img\" aria-label=\"candidate weight {0:g}%\">"
      "<rect x=\"0\" y=\"4\" width=\"600\" height=\"18\" fill=\"#c9d3e6\"/>"
      "<rect x=\"0\" y=\"4\" width=\"{1:.1f}\" height=\"18\" fill=\"#e08a1e\"/>"
      "<text x=\"606\" y=\"18\" font-size=\"12\">{0:g}%</text>"
      "<text x=\"4\" y=\"33\" font-size=\"10\" fill=\"#5b6475\">candidate share of sessions</text></svg>",
      weight, w);
  out += "<h3>Decisions</h3><table><tr><th>when</th><th class=num>step</th><th>action</th><th>reason</th></tr>";
  const Json decisions = latest(r.value("decisions", Json::array()), out, 4);
  for (const Json& dec : decisions) {
    out += fmt::format("<tr><td class=small>{}</td><td class=num>{}</td><td>{}</td><td>{}</td></tr>",
                       ago(dec.value("at", 0.0), d.now), dec.value("step", 0), html_escape(str(dec, "action")),
                       html_escape(str(dec, "reason")));
  }
  out += "</table><h3>Analyses</h3><table><tr><th>when</th><th class=num>step</th><th>verdict</th><th>reason</th></tr>";
  const Json analyses = latest(r.value("analyses", Json::array()), out, 4);
  for (const Json& a : analyses) {
    const bool passed = a.value("passed", false);
    out += fmt::format("<tr><td class=small>{}</td><td class=num>{}</td><td>{}</td><td>{}</td></tr>",
                       ago(a.value("at", 0.0), d.now), a.value("step", 0),
                       badge(passed ? "passed" : "failed", passed ? "ok" : "bad"), html_escape(str(a, "reason")));
  }
  if (analyses.empty()) out += "<tr><td colspan=4 class=muted>no conclusive analysis yet</td></tr>";
  return out + "</table></section>";
}

// Agreement over time: one line per arm, 0..100% up the side.
std::string agreement_chart(const Json& timeline) {
  constexpr double kLeft = 44, kTop = 10, kWidth = 580, kHeight = 150;
  std::string out = fmt::format("<svg width=\"{}\" height=\"{}\" role=\"img\" aria-label=\"shadow agreement over time\">",
                                kLeft + kWidth + 110, kTop + kHeight + 30);
  for (double y : {0.0, 0.5, 1.0}) {
    const double py = kTop + (1 - y) * kHeight;
    out += fmt::format("<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#e3e7ee\"/>"
                       "<text x=\"4\" y=\"{3:.1f}\" font-size=\"11\" fill=\"#5b6475\">{4:.0f}%</text>",
                       kLeft, kLeft + kWidth, py, py + 4, 100 * y);
  }
  double t0 = INFINITY, t1 = -INFINITY;
  for (const Json& b : timeline) t0 = std::min(t0, b.value("start", 0.0)), t1 = std::max(t1, b.value("start", 0.0));
  auto x_of = [&](double t) { return t1 > t0 ? kLeft + (t - t0) / (t1 - t0) * kWidth : kLeft + kWidth / 2; };
  const std::pair<const char*, const char*> arms[] = {{"candidate_agreement", "#e08a1e"}, {"noise_agreement", "#3b6fd1"}};
  int legend = 0;
  for (const auto& [key, colour] : arms) {
    std::string points, dots;
    for (const Json& b : timeline) {
      if (!b.contains(key) || !b[key].is_number()) continue;
      const double x = x_of(b.value("start", 0.0)), y = kTop + (1 - b[key].get<double>()) * kHeight;
      points += fmt::format("{:.1f},{:.1f} ", x, y);
      dots += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.5\" fill=\"{}\"/>", x, y, colour);
    }
    if (points.empty()) continue;
    out += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"{}\"/>{}", colour, points, dots);
    out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{}\"/>"
                       "<text x=\"{}\" y=\"{}\" font-size=\"11\">{}</text>",
                       kLeft + kWidth + 12, kTop + 14 * legend, colour, kLeft + kWidth + 26, kTop + 9 + 14 * legend,
                       legend == 0 ? "candidate" : "noise floor");
    ++legend;
  }
  if (legend == 0) {
    out += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"12\" fill=\"#6b7485\">no compared pairs yet</text>",
                       kLeft + 10, kTop + kHeight / 2);
  }
  out += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"10\" fill=\"#5b6475\">time &rarr;</text>", kLeft,
                     kTop + kHeight + 22);
  return out + "</svg>";
}

std::string shadow_section(const DashboardData& d) {
  std::string out = "<section id=\"shadow\"><h2>Shadow traffic</h2>";
  const Json& s = d.shadow;
  if (!s.is_object()) return out + "<p class=muted>No shadow store.</p></section>";
  const Json& a = s.value("active", Json());
  if (a.is_object()) {
    out += fmt::format("<p>In force ({}): copies to <b>{}</b>, {} of {}s, noise floor {}; {} in flight.</p>",
                       html_escape(str(s, "source")), html_escape(str(a, "version")), pct(a.value("fraction", Json())),
                       html_escape(str(a, "by")), pct(a.value("noiseFraction", Json())), s.value("in_flight", 0));
  } else {
    out += "<p class=muted>No shadow in force; the pairs kept are shown.</p>";
  }
  out += "<table><tr><th>arm</th><th class=num>pairs</th><th class=num>shadow errors</th><th class=num>exact match (not sampled)</th>"
         "<th class=num>disagreement</th><th class=num>finish reasons agree</th><th class=num>edit distance (mean)</th>"
         "<th class=num>first differing token (p50)</th><th class=num>logprob gap</th></tr>";
  for (const char* arm : {"candidate", "noise"}) {
    const Json st = s.contains("arms") ? s["arms"].value(arm, Json::object()) : Json::object();
    const Json ed = st.value("edit_distance", Json::object()), ft = st.value("first_diff_token", Json::object());
    const Json lg = st.value("logprob_gap", Json::object());
    out += fmt::format(
        "<tr><td>{}</td><td class=num>{}</td><td class=num>{}</td><td class=num>{}</td><td class=num>{}</td>"
        "<td class=num>{}</td><td class=num>{}</td><td class=num>{}</td><td class=num>{}</td></tr>",
        arm == std::string_view("noise") ? "noise floor" : "candidate", st.value("pairs", 0), st.value("shadow_errors", 0),
        pct(st.value("exact_match_rate", Json())), pct(st.value("disagreement_rate", Json())),
        pct(st.value("finish_reason_match_rate", Json())), num(ed.value("mean", Json())),
        num(ft.value("p50", Json()), "{:.0f}"), num(lg.value("mean", Json())));
  }
  out += "</table>";
  if (s.contains("excess_disagreement") && s["excess_disagreement"].is_number()) {
    out += fmt::format("<p>The candidate's disagreement beyond the noise floor: <b>{:+.1f} points</b>.</p>",
                       100 * s["excess_disagreement"].get<double>());
  }
  out += "<h3>Agreement over time</h3>" + agreement_chart(s.value("timeline", Json::array()));
  out += "<h3>The most differing pairs</h3>";
  const Json worst = s.value("worst", Json::array());
  if (worst.empty()) out += "<p class=muted>No differing pair.</p>";
  for (const Json& w : worst) {
    const Json& c = w.value("comparison", Json());
    const Json primary = w.value("primary", Json::object()), shadow = w.value("shadow", Json::object());
    out += fmt::format("<div class=example><div class=small><b>#{}</b> {} {} &middot; {} &rarr; {} &middot; {}</div>",
                       w.value("id", 0), html_escape(str(w, "target")), ago(w.value("at", 0.0), d.now),
                       html_escape(str(w, "primary_replica")), html_escape(str(w, "shadow_replica")),
                       c.is_object() ? fmt::format("edit distance {:.2f}, first differing token {}",
                                                   c.value("edit_distance", 0.0), c.value("first_diff_token", -1))
                                     : "shadow error: " + html_escape(str(shadow, "error")));
    out += fmt::format("<pre>{}</pre><div class=pair><div><div class=small>primary ({}, {})</div><pre>{}</pre></div>"
                       "<div><div class=small>shadow ({}, {})</div><pre>{}</pre></div></div></div>",
                       html_escape(str(w, "request")), html_escape(str(w, "primary_version")),
                       html_escape(str(primary, "finish_reason")), html_escape(str(primary, "text")),
                       html_escape(str(w, "shadow_version")), html_escape(str(shadow, "finish_reason")),
                       html_escape(str(shadow, "text")));
  }
  return out + "</section>";
}

}  // namespace

std::string render_dashboard(const DashboardData& d) {
  std::string out = fmt::format(
      "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"{}\">"
      "<title>sluice route</title><style>{}</style></head><body><header><h1>sluice route</h1>"
      "<span>policy {}</span><span>{} replica{}</span><span>refreshes every {} s</span></header><main>",
      d.refresh_seconds, kStyle, html_escape(d.policy), d.replicas.size(), d.replicas.size() == 1 ? "" : "s",
      d.refresh_seconds);
  out += replicas_section(d);
  out += rollout_section(d);
  out += shadow_section(d);
  return out + "</main></body></html>\n";
}

}  // namespace sluice::router
