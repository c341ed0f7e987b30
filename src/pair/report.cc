#include "pair/report.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace sluice::pair {
namespace {

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

// A file's name without its folders, for the table and the chart.
std::string shown_name(const std::string& path) { return path.substr(path.find_last_of('/') + 1); }

const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"};

}  // namespace

std::string render_table(const std::vector<Candidate>& ranked, const PairOptions& options) {
  std::string out = fmt::format("{:<4} {:<36} {:>8} {:>8}", "rank", "candidate", "accept", "min(p,q)");
  for (int32_t j = 1; j <= options.max_k; ++j) out += fmt::format(" {:>5}", fmt::format("A{}", j));
  for (int32_t b : options.batch_sizes) out += fmt::format(" {:>12}", fmt::format("speedup b={}", b));
  out += fmt::format(" {:>18}\n", "confirmed b=1");
  int rank = 0;
  for (const Candidate& c : ranked) {
    if (!c.refused.empty()) {
      out += fmt::format("{:<4} {:<36} refused: {}\n", "-", shown_name(c.name).substr(0, 36), c.refused);
      continue;
    }
    out += fmt::format("{:<4} {:<36} {:>8.3f} {:>8.3f}", ++rank, shown_name(c.name).substr(0, 36), c.acceptance,
                       c.acceptance_min_pq);
    for (double a : c.accepted_at) out += fmt::format(" {:>5.2f}", a);
    for (size_t b = 0; b < c.speedup.size(); ++b) out += fmt::format(" {:>12}", fmt::format("{:.2f}x k={}", c.speedup[b], c.best_k[b]));
    if (c.confirmed_on) {
      out += fmt::format(" {:>18}", fmt::format("{:.1f}x{}", *c.confirmed_on / *c.confirmed_off,
                                                 *c.outputs_identical ? "" : " DIFFERENT"));
    }
    out += "\n";
  }
  return out;
}

nlohmann::json to_json(const std::vector<Candidate>& ranked, const TargetCosts& costs, const PairOptions& options,
                       const std::string& target, int64_t num_prompts) {
  nlohmann::json j;
  j["target"] = target;
  j["prompts"] = num_prompts;
  j["temperature"] = options.temperature;
  j["max_tokens"] = options.max_tokens;
  j["max_k"] = options.max_k;
  j["batch_sizes"] = options.batch_sizes;
  j["target_step_seconds"] = costs.step_seconds;
  j["candidates"] = nlohmann::json::array();
  for (const Candidate& c : ranked) {
    nlohmann::json x;
    x["name"] = c.name;
    x["kind"] = c.model ? "draft_model" : "ngram";
    if (!c.refused.empty()) {
      x["refused"] = c.refused;
    } else {
      x["positions"] = c.positions;
      x["acceptance"] = c.acceptance;
      x["acceptance_min_pq"] = c.acceptance_min_pq;
      x["accepted_at"] = c.accepted_at;
      x["draft_step_seconds"] = c.draft_step_seconds;
      x["best_k"] = c.best_k;
      x["speedup"] = c.speedup;
      if (c.confirmed_on) {
        x["confirmed"] = {{"tokens_per_second_on", *c.confirmed_on},
                          {"tokens_per_second_off", *c.confirmed_off},
                          {"outputs_identical", *c.outputs_identical}};
      }
    }
    j["candidates"].push_back(std::move(x));
  }
  return j;
}

std::string render_svg(const std::vector<Candidate>& ranked, const PairOptions& options, const std::string& target) {
  constexpr int kW = 980, kH = 440, kPanel = 380, kTop = 50, kPlotH = 300;
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"20\" y=\"22\" font-size=\"15\">sluice pair: drafts for {}</text>\n",
      kW, kH, xml_escape(target));
  double max_speedup = 1;
  for (const Candidate& c : ranked) {
    for (double x : c.speedup) max_speedup = std::max(max_speedup, x);
  }
  max_speedup = std::ceil(max_speedup * 2) / 2;
  struct Panel {
    int x0;
    std::string title, xlabel;
    int n;
    double ymax;
  };
  const Panel panels[] = {{60, "chance that the first j drafts are accepted", "draft position j", options.max_k, 1.0},
                          {60 + kPanel + 80, "predicted speedup (best k)", "batch size",
                           static_cast<int>(options.batch_sizes.size()), max_speedup}};
  for (const Panel& p : panels) {
    s += fmt::format("<text x=\"{}\" y=\"{}\">{}</text>\n", p.x0, kTop - 8, p.title);
    s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#999\"/>\n", p.x0, kTop,
                     kPanel, kPlotH);
    s += fmt::format("<text x=\"{}\" y=\"{}\">{}</text>\n", p.x0 + kPanel / 2 - 40, kTop + kPlotH + 32, p.xlabel);
    for (int t = 0; t <= 4; ++t) {
      const double v = p.ymax * t / 4;
      const int y = kTop + kPlotH - static_cast<int>(kPlotH * t / 4.0);
      s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{:.2f}</text>\n", p.x0 - 4, y + 4, v);
    }
  }
  auto px = [&](const Panel& p, int i) { return p.x0 + (p.n > 1 ? kPanel * i / (p.n - 1) : kPanel / 2); };
  auto py = [&](const Panel& p, double v) { return kTop + kPlotH - kPlotH * std::clamp(v / p.ymax, 0.0, 1.0); };
  for (int i = 0; i < panels[0].n; ++i) {
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", px(panels[0], i), kTop + kPlotH + 16, i + 1);
  }
  for (int i = 0; i < panels[1].n; ++i) {
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", px(panels[1], i), kTop + kPlotH + 16,
                     options.batch_sizes[i]);
  }
  int shown = 0;
  for (const Candidate& c : ranked) {
    if (!c.refused.empty()) continue;
    const char* color = kColors[shown % 8];
    // Candidates often coincide (every one at 1.00x where none helps): each after the first is
    // dashed in its own pattern, so a line drawn over another leaves it showing.
    static constexpr const char* kDashes[] = {"", " stroke-dasharray=\"7 4\"", " stroke-dasharray=\"2 3\"",
                                              " stroke-dasharray=\"9 3 2 3\""};
    const char* dash = kDashes[shown % 4];
    std::string a, b;
    for (size_t i = 0; i < c.accepted_at.size(); ++i) a += fmt::format("{},{:.1f} ", px(panels[0], i), py(panels[0], c.accepted_at[i]));
    for (size_t i = 0; i < c.speedup.size(); ++i) b += fmt::format("{},{:.1f} ", px(panels[1], i), py(panels[1], c.speedup[i]));
    for (const std::string* points : {&a, &b}) {
      s += fmt::format(
          "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{} points=\"{}\"><title>{}</title>"
          "</polyline>\n",
          color, dash, *points, xml_escape(c.name));
    }
    s += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"{}\">{}</text>\n", 60 + 190 * (shown % 5), kH - 30 + 14 * (shown / 5),
                     color, xml_escape(shown_name(c.name)));
    ++shown;
  }
  return s + "</svg>\n";
}

std::string serve_flags(const std::vector<Candidate>& ranked, const std::string& target) {
  if (ranked.empty() || !ranked[0].refused.empty() || ranked[0].speedup.empty() || ranked[0].speedup[0] <= 1.0) return {};
  const Candidate& c = ranked[0];
  if (c.confirmed_on && !(*c.confirmed_on > *c.confirmed_off)) return {};  // measured slower after all
  const int32_t k = std::max(1, c.best_k[0]);
  if (c.model) return fmt::format("sluice serve -m {} --draft-model {} --spec-tokens {}", target, c.name, k);
  return fmt::format("sluice serve -m {} --spec ngram --spec-ngram-min {} --spec-ngram-max {} --spec-tokens {}", target,
                     c.ngram_min, c.ngram_max, k);
}

}  // namespace sluice::pair
