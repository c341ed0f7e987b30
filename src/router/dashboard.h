// The router's dashboard (GET /ui, behind the admin key): one server-rendered HTML page, inline
// CSS and SVG, no script, no external file or font, refreshed by the browser every few seconds.
//
//   replicas   version, state, load (in flight, waiting, KV usage), requests, measured hit rate
//   rollout    stable -> candidate, phase, step, the candidate's weight, every decision with its
//              reason, the analyses (passed or failed, why)
//   shadow     the shadow in force, per arm the exact-match and disagreement rates, agreement
//              over time (an SVG chart: candidate and noise floor), the worst differing pairs
//              with both outputs side by side
//
// It is drawn from the same JSON the admin API answers (/admin/replicas, /admin/rollouts,
// /admin/shadow/report), so what the page shows is what the API says. Every text from outside
// (outputs, reasons, URLs) is HTML-escaped.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace sluice::router {

struct DashboardData {
  nlohmann::ordered_json replicas = nlohmann::ordered_json::array();  // /admin/replicas' "replicas"
  nlohmann::ordered_json rollout;    // /admin/rollouts' "current" (null: none), with "analyses"
  nlohmann::ordered_json shadow;     // /admin/shadow/report (null: no store)
  std::string policy;
  double now = 0;                    // seconds since the epoch, for "12 s ago"
  int refresh_seconds = 5;
};

std::string render_dashboard(const DashboardData& data);

}  // namespace sluice::router
