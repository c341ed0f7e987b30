#include "bench/svg.h"

#include <algorithm>
#include <cmath>

#include "common/html.h"

namespace sluice::bench {
namespace {

constexpr double kWidth = 900;
constexpr double kPanelHeight = 250;
constexpr double kLeft = 70, kRight = 20, kTop = 50, kGap = 60;
constexpr const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd"};

// Tick values 1, 2 or 5 x 10^k apart, about `count` of them over [0, max].
std::vector<double> linear_ticks(double max, int count) {
  if (max <= 0) return {0};
  const double raw = max / count;
  const double magnitude = std::pow(10, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {2.0, 5.0, 10.0}) {
    if (step >= raw) break;
    step = m * magnitude;
  }
  std::vector<double> ticks;
  for (double v = 0; v <= max * (1 + 1e-9); v += step) ticks.push_back(v);
  return ticks;
}

// A panel's plot area and its mapping of data to pixels.
struct Panel {
  double x0, y0, width, height;  // pixels of the plot area
  double xmin, xmax, ymin, ymax;  // data range
  bool log_x = false;

  double px(double x) const {
    const double t = log_x ? (std::log10(x) - std::log10(xmin)) / (std::log10(xmax) - std::log10(xmin))
                           : (x - xmin) / (xmax - xmin);
    return x0 + width * std::clamp(t, 0.0, 1.0);
  }
  double py(double y) const { return y0 + height * (1 - std::clamp((y - ymin) / (ymax - ymin), 0.0, 1.0)); }
};

class Svg {
 public:
  void text(double x, double y, std::string_view s, const char* anchor = "middle", int size = 11) {
    out_ += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" font-size="{}" text-anchor="{}">{}</text>)", x, y, size, anchor,
                        html_escape(s));
    out_ += '\n';
  }
  void line(double x1, double y1, double x2, double y2, const char* stroke, double width = 1) {
    out_ += fmt::format(R"(<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="{}" stroke-width="{}"/>)", x1,
                        y1, x2, y2, stroke, width);
    out_ += '\n';
  }
  void polyline(const std::vector<std::pair<double, double>>& points, const char* stroke) {
    if (points.empty()) return;
    out_ += R"(<polyline fill="none" stroke-width="1.5" stroke=")" + std::string(stroke) + R"(" points=")";
    for (const auto& [x, y] : points) out_ += fmt::format("{:.1f},{:.1f} ", x, y);
    out_ += "\"/>\n";
  }
  void circle(double x, double y, const char* fill) {
    out_ += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="2" fill="{}" fill-opacity="0.7"/>)", x, y, fill);
    out_ += '\n';
  }
  void cross(double x, double y) {
    line(x - 3, y - 3, x + 3, y + 3, "#d62728", 1.5);
    line(x - 3, y + 3, x + 3, y - 3, "#d62728", 1.5);
  }
  // Above the plot area, at its left, clear of the data.
  void legend(const Panel& p, const std::vector<std::string>& names) {
    double x = p.x0;
    for (size_t i = 0; i < names.size(); ++i) {
      const char* color = names[i] == "failed" ? "#d62728" : kColors[i % 4];
      out_ += fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="10" height="10" fill="{}"/>)", x, p.y0 - 20, color);
      out_ += '\n';
      text(x + 14, p.y0 - 11, names[i], "start", 11);
      x += 24 + 7.0 * static_cast<double>(names[i].size());
    }
  }
  // Frame, title, axis labels and ticks of a linear-y panel (x ticks linear or decades).
  void axes(const Panel& p, std::string_view title, std::string_view xlabel, std::string_view ylabel) {
    out_ += fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="none" stroke="#444"/>)",
                        p.x0, p.y0, p.width, p.height);
    out_ += '\n';
    text(p.x0 + p.width - 2, p.y0 - 10, title, "end", 13);
    text(p.x0 + p.width / 2, p.y0 + p.height + 32, xlabel);
    out_ += fmt::format(R"svg(<text x="{:.1f}" y="{:.1f}" font-size="11" text-anchor="middle" transform="rotate(-90 {:.1f} {:.1f})">{}</text>)svg",
                        p.x0 - 50, p.y0 + p.height / 2, p.x0 - 50, p.y0 + p.height / 2, html_escape(ylabel));
    out_ += '\n';
    for (double y : linear_ticks(p.ymax - p.ymin, 5)) {
      line(p.x0 - 4, p.py(p.ymin + y), p.x0, p.py(p.ymin + y), "#444");
      text(p.x0 - 6, p.py(p.ymin + y) + 4, fmt::format("{:g}", p.ymin + y), "end", 10);
    }
    if (p.log_x) {
      for (double x = std::pow(10, std::ceil(std::log10(p.xmin))); x <= p.xmax * (1 + 1e-9); x *= 10) {
        line(p.px(x), p.y0 + p.height, p.px(x), p.y0 + p.height + 4, "#444");
        line(p.px(x), p.y0, p.px(x), p.y0 + p.height, "#ddd");
        text(p.px(x), p.y0 + p.height + 16, fmt::format("{:g}", x), "middle", 10);
      }
    } else {
      for (double x : linear_ticks(p.xmax - p.xmin, 8)) {
        line(p.px(p.xmin + x), p.y0 + p.height, p.px(p.xmin + x), p.y0 + p.height + 4, "#444");
        text(p.px(p.xmin + x), p.y0 + p.height + 16, fmt::format("{:g}", p.xmin + x), "middle", 10);
      }
    }
  }
  std::string& out() { return out_; }

 private:
  std::string out_;
};

Panel panel_at(int index, double xmax, double ymax) {
  return Panel{kLeft, kTop + index * (kPanelHeight + kGap), kWidth - kLeft - kRight, kPanelHeight - 40,
               0, std::max(xmax, 1e-3), 0, std::max(ymax, 1e-3)};
}

void draw_latency_by_time(Svg& svg, const BenchReport& report, double end_s) {
  double ymax = 0;
  for (const RequestRecord& r : report.records) ymax = std::max(ymax, 1000 * r.e2e_s);
  const Panel p = panel_at(0, end_s, ymax * 1.05);
  svg.axes(p, "latency by send time", "send time (s)", "ms");
  for (const RequestRecord& r : report.records) {
    if (!r.ok) {
      svg.cross(p.px(r.start_s), p.py(1000 * r.e2e_s));
      continue;
    }
    svg.circle(p.px(r.start_s), p.py(1000 * r.e2e_s), kColors[1]);
    if (r.ttft_s >= 0) svg.circle(p.px(r.start_s), p.py(1000 * r.ttft_s), kColors[0]);
  }
  svg.legend(p, {"time to first token", "end to end", "failed"});
}

void draw_throughput(Svg& svg, const BenchReport& report, double end_s) {
  constexpr int kBins = 60;
  std::vector<double> tokens(kBins, 0);
  const double bin_s = end_s / kBins;
  for (const RequestRecord& r : report.records) {
    if (!r.ok || r.ttft_s < 0 || r.num_token_chunks == 0) continue;
    const double per_chunk = static_cast<double>(r.output_tokens) / r.num_token_chunks;
    double t = r.start_s + r.ttft_s;
    for (int32_t i = 0; i < r.num_token_chunks; ++i) {
      if (i > 0) t += r.itl_s[i - 1];
      tokens[std::clamp(static_cast<int>(t / bin_s), 0, kBins - 1)] += per_chunk;
    }
  }
  double ymax = 0;
  for (double& v : tokens) ymax = std::max(ymax, v /= bin_s);
  const Panel p = panel_at(1, end_s, ymax * 1.1);
  svg.axes(p, "output throughput", "time (s)", "tokens/s");
  std::vector<std::pair<double, double>> points;
  for (int i = 0; i < kBins; ++i) {
    points.emplace_back(p.px(i * bin_s), p.py(tokens[i]));
    points.emplace_back(p.px((i + 1) * bin_s), p.py(tokens[i]));
  }
  svg.polyline(points, kColors[2]);
  if (ymax == 0) svg.text(p.x0 + p.width / 2, p.y0 + p.height / 2, "no tokens received", "middle", 12);
}

void draw_cdfs(Svg& svg, const BenchReport& report) {
  std::vector<std::vector<double>> series(4);
  for (const RequestRecord& r : report.records) {
    if (!r.ok) continue;
    if (r.ttft_s >= 0) series[0].push_back(1000 * r.ttft_s);
    if (r.tpot_s() >= 0) series[1].push_back(1000 * r.tpot_s());
    for (double gap : r.itl_s) series[2].push_back(1000 * gap);
    series[3].push_back(1000 * r.e2e_s);
  }
  double lo = 1e300, hi = 0;
  for (auto& s : series) {
    std::sort(s.begin(), s.end());
    for (double v : s) {
      if (v > 0) lo = std::min(lo, v), hi = std::max(hi, v);
    }
  }
  if (hi <= 0) lo = 0.1, hi = 1;
  Panel p = panel_at(2, 0, 1);
  p.log_x = true;
  p.xmin = std::pow(10, std::floor(std::log10(lo)));
  p.xmax = std::pow(10, std::ceil(std::log10(hi)));
  if (p.xmax <= p.xmin) p.xmax = p.xmin * 10;
  svg.axes(p, "latency CDFs", "ms (log scale)", "fraction of samples");
  for (size_t k = 0; k < series.size(); ++k) {
    const auto& s = series[k];
    std::vector<std::pair<double, double>> points;
    const size_t step = std::max<size_t>(1, s.size() / 400);  // at most ~400 points a curve
    for (size_t i = 0; i < s.size(); i += step) {
      if (s[i] > 0) points.emplace_back(p.px(s[i]), p.py(static_cast<double>(i + 1) / s.size()));
    }
    if (!s.empty() && s.back() > 0) points.emplace_back(p.px(s.back()), p.py(1));
    svg.polyline(points, kColors[k]);
  }
  svg.legend(p, {"TTFT", "TPOT", "ITL", "E2E"});
  if (std::ranges::all_of(series, [](const auto& v) { return v.empty(); })) {
    svg.text(p.x0 + p.width / 2, p.y0 + p.height / 2, "no request succeeded", "middle", 12);
  }
}

}  // namespace

std::string render_svg(const BenchReport& report) {
  const Summary& s = report.summary;
  double end_s = s.duration_s;
  for (const RequestRecord& r : report.records) end_s = std::max(end_s, r.start_s + r.e2e_s);
  const double height = kTop + 3 * kPanelHeight + 2 * kGap;
  Svg svg;
  svg.out() += fmt::format(
      R"(<svg xmlns="http://www.w3.org/2000/svg" width="{0:g}" height="{1:g}" viewBox="0 0 {0:g} {1:g}" font-family="sans-serif">)",
      kWidth, height);
  svg.out() += "\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg.text(kWidth / 2, 20,
           fmt::format("sluice bench: {} on {}: {} ok, {} failed, {:.1f} output tokens/s", report.config.model,
                       report.api_url, s.num_ok, s.num_errors, s.output_tokens_per_s),
           "middle", 14);
  draw_latency_by_time(svg, report, end_s);
  draw_throughput(svg, report, end_s);
  draw_cdfs(svg, report);
  svg.out() += "</svg>\n";
  return std::move(svg.out());
}

}  // namespace sluice::bench
