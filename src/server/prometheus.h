// /metrics: the engine's metrics and the HTTP server's counters in the Prometheus text
// exposition format (version 0.0.4: https://prometheus.io/docs/instrumenting/exposition_formats/),
// every name prefixed sluice_ and every engine series labelled with model_name, as vLLM
// labels its own, so a router or a dashboard can tell replicas' models apart.
//
// Names follow Prometheus' conventions (counters end in _total, base units: seconds), and
// where vLLM exports the same quantity the name matches vLLM's after the prefix
// (num_requests_running, prefix_cache_queries_total, time_to_first_token_seconds, ...), so
// dashboards carry over.
//
// Warm cache hit rate: prefix_cache_hits_total / prefix_cache_queries_total in tokens, and
// prefix_cache_hit_requests_total / prefix_cache_query_requests_total per request.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "engine/metrics.h"

namespace sluice::server {

struct HttpMetrics {
  // (route, status code) -> responses. Routes are the server's own paths ("/v1/completions")
  // or "other" for unknown ones, so a scanner cannot grow this map without bound.
  std::map<std::pair<std::string, int>, int64_t> responses;
  int64_t client_disconnects = 0;   // generations cancelled because the client went away
  int64_t slow_client_cancels = 0;  // streams cancelled because the client stopped reading
  int64_t request_timeouts = 0;     // requests cut off half-sent (408)
  int64_t write_timeouts = 0;       // connections closed: the client took nothing of a write in time
  int64_t open_connections = 0;
  int64_t buffered_bytes = 0;       // response bytes queued for clients, not yet written
};

std::string prometheus_text(const EngineMetrics& engine, const HttpMetrics& http, const std::string& model_name);

// `value` escaped for a label value: backslash, double quote and newline.
std::string escape_label_value(const std::string& value);

}  // namespace sluice::server
