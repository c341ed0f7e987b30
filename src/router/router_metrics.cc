// The router's own /metrics.
#include <fmt/format.h>

#include "router/router_impl.h"

namespace sluice::router {
namespace {

std::string label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}


}  // namespace

std::string metrics_of(const Router::Impl& s) {
  std::string out;
  auto family = [&](std::string_view name, std::string_view type, std::string_view help) {
    out += fmt::format("# HELP sluice_router_{} {}\n# TYPE sluice_router_{} {}\n", name, help, name, type);
  };
  const auto stats = s.pool.stats();
  family("backend_up", "gauge", "1 while the replica passes its health checks.");
  for (const auto& b : stats) out += fmt::format("sluice_router_backend_up{{backend=\"{}\"}} {}\n", label(b.name), b.up ? 1 : 0);
  family("backend_ejected", "gauge", "1 while the replica is ejected for failures in a row.");
  for (const auto& b : stats) out += fmt::format("sluice_router_backend_ejected{{backend=\"{}\"}} {}\n", label(b.name), b.ejected ? 1 : 0);
  family("backend_draining", "gauge", "1 while the replica is draining (admin API): no new requests.");
  for (const auto& b : stats) out += fmt::format("sluice_router_backend_draining{{backend=\"{}\"}} {}\n", label(b.name), b.draining ? 1 : 0);
  family("backend_weight", "gauge", "The replica's weight: its share relative to the others.");
  for (const auto& b : stats) out += fmt::format("sluice_router_backend_weight{{backend=\"{}\",source=\"{}\"}} {}\n", label(b.name), source_name(b.source), b.weight);
  family("backend_in_flight", "gauge", "Requests the router has in flight at the replica.");
  for (const auto& b : stats) out += fmt::format("sluice_router_backend_in_flight{{backend=\"{}\"}} {}\n", label(b.name), b.in_flight);
  family("backend_waiting", "gauge", "Waiting requests the replica reported on its /metrics.");
  for (const auto& b : stats) out += fmt::format("sluice_router_backend_waiting{{backend=\"{}\"}} {}\n", label(b.name), b.waiting);
  family("backend_kv_usage_ratio", "gauge", "KV cache usage the replica reported, 0..1.");
  for (const auto& b : stats) out += fmt::format("sluice_router_backend_kv_usage_ratio{{backend=\"{}\"}} {}\n", label(b.name), b.kv_usage);
  family("ejections_total", "counter", "Times the replica was ejected for failures in a row.");
  for (const auto& b : stats) out += fmt::format("sluice_router_ejections_total{{backend=\"{}\"}} {}\n", label(b.name), b.ejections);
  family("health_check_failures_total", "counter", "Failed active health checks.");
  for (const auto& b : stats) out += fmt::format("sluice_router_health_check_failures_total{{backend=\"{}\"}} {}\n", label(b.name), b.health_failures);
  MutexLock lock(s.metrics_mu);
  const Metrics& m = s.metrics;
  family("requests_total", "counter", "Requests by replica, policy decision and status (499: the client went away).");
  for (const auto& [k, n] : m.requests) {
    out += fmt::format("sluice_router_requests_total{{backend=\"{}\",decision=\"{}\",status=\"{}\"}} {}\n",
                       label(std::get<0>(k)), std::get<1>(k), std::get<2>(k), n);
  }
  family("upstream_errors_total", "counter", "Attempts that got no answer from the replica, by kind.");
  for (const auto& [k, n] : m.upstream_errors) {
    out += fmt::format("sluice_router_upstream_errors_total{{backend=\"{}\",kind=\"{}\"}} {}\n", label(k.first), k.second, n);
  }
  family("retries_total", "counter", "Requests sent again to another replica.");
  out += fmt::format("sluice_router_retries_total {}\n", m.retries);
  family("client_disconnects_total", "counter", "Requests cancelled upstream because the client went away.");
  out += fmt::format("sluice_router_client_disconnects_total {}\n", m.client_disconnects);
  family("unrouted_total", "counter", "Requests answered 503 or 429 by the router itself: no replica could take them.");
  out += fmt::format("sluice_router_unrouted_total {}\n", m.no_backend);
  family("stream_errors_total", "counter", "Streams ended with an error event because the replica failed mid-stream.");
  out += fmt::format("sluice_router_stream_errors_total {}\n", m.stream_errors);
  auto histograms = [&](std::string_view name, std::string_view help, const std::map<std::string, Histogram>& hs) {
    family(name, "histogram", help);
    for (const auto& [backend, h] : hs) {
      for (size_t i = 0; i < kBuckets.size(); ++i) {
        out += fmt::format("sluice_router_{}_bucket{{backend=\"{}\",le=\"{}\"}} {}\n", name, label(backend), kBuckets[i], h.counts[i]);
      }
      out += fmt::format("sluice_router_{}_bucket{{backend=\"{}\",le=\"+Inf\"}} {}\n", name, label(backend), h.count);
      out += fmt::format("sluice_router_{}_sum{{backend=\"{}\"}} {}\n", name, label(backend), h.sum);
      out += fmt::format("sluice_router_{}_count{{backend=\"{}\"}} {}\n", name, label(backend), h.count);
    }
  };
  // The usage sums, per replica (label backend) and per usage group (label group, names prefixed group_).
  auto usage = [&](std::string_view prefix, std::string_view key, std::string_view per,
                   const std::map<std::string, Metrics::Usage>& sums) {
    const std::pair<std::string_view, std::string_view> families[] = {
        {"prompt_tokens_total", "Prompt tokens of answers with usage"},
        {"cached_tokens_total", "Of those, the tokens served from the replicas' prefix caches (usage)"},
        {"prompt_chunks_total", "cache_aware: the 64-byte chunks of those prompts"},
        {"predicted_cached_chunks_total",
         "cache_aware: of those, the chunks the router believed the replica held (against cached/prompt tokens)"}};
    for (size_t f = 0; f < std::size(families); ++f) {
      const std::string name = fmt::format("{}{}", prefix, families[f].first);
      family(name, "counter", fmt::format("{}, per {}.", families[f].second, per));
      for (const auto& [k, u] : sums) {
        const int64_t values[] = {u.prompt_tokens, u.cached_tokens, u.prompt_chunks, u.predicted_chunks};
        out += fmt::format("sluice_router_{}{{{}=\"{}\"}} {}\n", name, key, label(k), values[f]);
      }
    }
  };
  usage("", "backend", "replica", m.usage);
  usage("group_", "group", "usage group (the X-Session-Group header; else session or none)", m.group_usage);
  family("discovery_lookups_total", "counter", "DNS discovery lookups by name and result (a failed one leaves the replicas as they were).");
  for (const auto& [spec, r] : m.resolutions) {
    out += fmt::format("sluice_router_discovery_lookups_total{{name=\"{}\",result=\"ok\"}} {}\n", label(spec), r.first);
    out += fmt::format("sluice_router_discovery_lookups_total{{name=\"{}\",result=\"error\"}} {}\n", label(spec), r.second);
  }
  family("shadow_pairs_total", "counter",
         "Shadow copies compared with their primary, by arm (candidate; noise: a second replica of the primary's "
         "version) and result (agree, disagree, shadow_error).");
  for (const auto& [k, n] : m.shadow_pairs) {
    out += fmt::format("sluice_router_shadow_pairs_total{{arm=\"{}\",result=\"{}\"}} {}\n", k.first, k.second, n);
  }
  family("shadow_dropped_total", "counter",
         "Shadow copies not compared, by reason: overflow (past the in-flight bound: never sent), no_replica, "
         "primary_failed (nothing to compare with).");
  for (const auto& [reason, n] : m.shadow_dropped) {
    out += fmt::format("sluice_router_shadow_dropped_total{{reason=\"{}\"}} {}\n", reason, n);
  }
  family("shadow_in_flight", "gauge", "Shadow copies sent and not yet answered.");
  out += fmt::format("sluice_router_shadow_in_flight {}\n", s.shadow_in_flight.load());
  family("backend_info", "gauge", "1 for each replica, with its version label (canary rollouts).");
  for (const auto& b : stats) {
    out += fmt::format("sluice_router_backend_info{{backend=\"{}\",version=\"{}\"}} 1\n", label(b.name), label(b.version));
  }
  {
    MutexLock lock(s.rollout_mu);
    if (s.rollout) {
      const Rollout& r = *s.rollout;
      const std::string labels = fmt::format("rollout=\"{}\",stable=\"{}\",candidate=\"{}\",phase=\"{}\"",
                                             label(r.spec().name), label(r.spec().stable), label(r.spec().candidate),
                                             phase_name(r.phase()));
      family("rollout_weight_percent", "gauge", "The candidate's share of sessions in the latest rollout.");
      out += fmt::format("sluice_router_rollout_weight_percent{{{}}} {}\n", labels, r.weight());
      family("rollout_step", "gauge", "The step the latest rollout waits on (its number of steps once finished).");
      out += fmt::format("sluice_router_rollout_step{{{}}} {}\n", labels, r.step());
      family("rollout_failed_analyses", "gauge", "Failed analyses of the latest rollout (past failureLimit it aborts).");
      out += fmt::format("sluice_router_rollout_failed_analyses{{{}}} {}\n", labels, r.failed_analyses());
      family("rollout_window_requests", "gauge", "Requests of each version in the current analysis window, and their errors.");
      for (const auto& [version, w] : {std::pair{r.spec().stable, &s.stable_window}, std::pair{r.spec().candidate, &s.candidate_window}}) {
        out += fmt::format("sluice_router_rollout_window_requests{{version=\"{}\",result=\"all\"}} {}\n", label(version), w->requests);
        out += fmt::format("sluice_router_rollout_window_requests{{version=\"{}\",result=\"error\"}} {}\n", label(version), w->errors);
      }
    }
  }
  histograms("request_duration_seconds", "From the request read to the last byte relayed, per replica.", m.e2e);
  histograms("time_to_first_byte_seconds", "Streams: from the request sent upstream to its first body bytes.", m.ttft);
  return out;
}

std::string Router::metrics_text() const { return metrics_of(*impl_); }

}  // namespace sluice::router
