#include "server/prometheus.h"

#include <fmt/format.h>

namespace sluice::server {

std::string escape_label_value(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

namespace {

// Go's strconv formatting as Prometheus writes floats: integers without a decimal point,
// +Inf for the overflow bucket.
std::string number(double v) {
  if (v == static_cast<double>(static_cast<int64_t>(v)) && v > -1e15 && v < 1e15) {
    return fmt::format("{}", static_cast<int64_t>(v));
  }
  return fmt::format("{}", v);
}

class Writer {
 public:
  explicit Writer(std::string model) : labels_(fmt::format("model_name=\"{}\"", escape_label_value(model))) {}

  void header(const char* name, const char* type, const char* help) {
    out_ += fmt::format("# HELP sluice_{} {}\n# TYPE sluice_{} {}\n", name, help, name, type);
  }
  void sample(const char* name, double value, const std::string& extra_labels = {}) {
    out_ += fmt::format("sluice_{}{{{}{}{}}} {}\n", name, labels_, extra_labels.empty() ? "" : ",", extra_labels,
                        number(value));
  }
  void gauge(const char* name, double value, const char* help) {
    header(name, "gauge", help);
    sample(name, value);
  }
  void counter(const char* name, double value, const char* help) {
    header(name, "counter", help);
    sample(name, value);
  }
  void histogram(const char* name, const Histogram& h, const char* help) {
    header(name, "histogram", help);
    int64_t cumulative = 0;
    const std::string bucket = fmt::format("{}_bucket", name);
    for (size_t i = 0; i < h.upper_bounds().size(); ++i) {
      cumulative += h.bucket_counts()[i];
      sample(bucket.c_str(), static_cast<double>(cumulative), fmt::format("le=\"{}\"", number(h.upper_bounds()[i])));
    }
    sample(bucket.c_str(), static_cast<double>(h.count()), "le=\"+Inf\"");
    sample(fmt::format("{}_sum", name).c_str(), h.sum());
    sample(fmt::format("{}_count", name).c_str(), static_cast<double>(h.count()));
  }
  std::string& out() { return out_; }

 private:
  std::string labels_;
  std::string out_;
};

}  // namespace

std::string prometheus_text(const EngineMetrics& m, const HttpMetrics& http, const std::string& model_name) {
  Writer w(model_name);
  w.gauge("num_requests_running", m.num_running, "Requests in the running batch.");
  w.gauge("num_requests_waiting", m.num_waiting, "Requests waiting for their first step.");
  w.gauge("kv_cache_usage_ratio",
          m.kv_blocks_total ? static_cast<double>(m.kv_blocks_used) / m.kv_blocks_total : 0.0,
          "Fraction of KV cache blocks held by running requests (0..1).");
  w.header("kv_cache_blocks", "gauge", "KV cache blocks by state: used (held), cached (kept for prefix reuse), free.");
  w.sample("kv_cache_blocks", m.kv_blocks_used, "state=\"used\"");
  w.sample("kv_cache_blocks", m.kv_blocks_cached, "state=\"cached\"");
  w.sample("kv_cache_blocks", m.kv_blocks_free, "state=\"free\"");
  w.gauge("kv_cache_capacity_blocks", m.kv_blocks_total, "KV cache blocks in the pool.");

  w.counter("engine_steps_total", static_cast<double>(m.num_steps), "Engine steps (forward passes) run.");
  w.counter("num_preemptions_total", static_cast<double>(m.num_preemptions),
            "Sequences preempted (blocks freed, recomputed later) because the KV cache was full.");
  w.counter("requests_submitted_total", static_cast<double>(m.num_requests_submitted), "Requests accepted by the engine.");
  w.header("requests_rejected_total", "counter", "Requests refused by the engine, by reason (those the API refuses first: sluice_http_responses_total).");
  w.sample("requests_rejected_total", static_cast<double>(m.num_requests_overloaded), "reason=\"overloaded\"");
  w.sample("requests_rejected_total", static_cast<double>(m.num_requests_rejected - m.num_requests_overloaded),
           "reason=\"invalid\"");
  w.counter("requests_coalesced_total", static_cast<double>(m.num_requests_coalesced),
            "Requests served by an identical concurrent request's computation.");
  w.header("request_success_total", "counter", "Finished requests, by finish reason.");
  const char* reasons[] = {"stop", "length", "abort", "error"};
  for (int i = 0; i < 4; ++i) {
    w.sample("request_success_total", static_cast<double>(m.num_requests_finished[i]),
             fmt::format("finished_reason=\"{}\"", reasons[i]));
  }
  w.counter("prompt_tokens_total", static_cast<double>(m.num_prompt_tokens), "Prompt tokens of finished requests (a request of n choices counts its prompt n times; usage once).");
  w.counter("generation_tokens_total", static_cast<double>(m.num_generation_tokens),
            "Generated tokens of finished requests.");
  w.counter("scheduled_tokens_total", static_cast<double>(m.num_scheduled_tokens),
            "Tokens computed by the engine, recomputation after preemption included.");

  w.counter("prefix_cache_queries_total", static_cast<double>(m.prefix_cache_query_tokens),
            "Prompt tokens looked up in the prefix cache.");
  w.counter("prefix_cache_hits_total", static_cast<double>(m.prefix_cache_hit_tokens),
            "Prompt tokens whose KV came from the prefix cache (warm hits).");
  w.counter("prefix_cache_query_requests_total", static_cast<double>(m.prefix_cache_query_requests),
            "Requests looked up in the prefix cache.");
  w.counter("prefix_cache_hit_requests_total", static_cast<double>(m.prefix_cache_hit_requests),
            "Requests with at least one prompt block from the prefix cache (warm hits).");
  w.counter("kv_cache_evictions_total", static_cast<double>(m.num_kv_evictions),
            "Cached KV blocks evicted to make room.");

  // Speculative decoding, by proposer (vLLM's names).
  w.header("spec_decode_num_drafts_total", "counter", "Steps in which a sequence verified draft tokens.");
  for (const auto& [name, s] : m.spec) {
    w.sample("spec_decode_num_drafts_total", static_cast<double>(s.num_drafts),
             fmt::format("proposer=\"{}\"", escape_label_value(name)));
  }
  w.header("spec_decode_num_draft_tokens_total", "counter", "Draft tokens verified.");
  for (const auto& [name, s] : m.spec) {
    w.sample("spec_decode_num_draft_tokens_total", static_cast<double>(s.num_draft_tokens),
             fmt::format("proposer=\"{}\"", escape_label_value(name)));
  }
  w.header("spec_decode_num_accepted_tokens_total", "counter", "Draft tokens accepted.");
  for (const auto& [name, s] : m.spec) {
    w.sample("spec_decode_num_accepted_tokens_total", static_cast<double>(s.num_accepted_tokens),
             fmt::format("proposer=\"{}\"", escape_label_value(name)));
  }
  w.header("spec_decode_num_accepted_tokens_per_pos_total", "counter",
           "Draft tokens accepted, by position in their step's drafts (0: the first).");
  for (const auto& [name, s] : m.spec) {
    for (size_t i = 0; i < s.accepted_per_position.size(); ++i) {
      w.sample("spec_decode_num_accepted_tokens_per_pos_total", static_cast<double>(s.accepted_per_position[i]),
               fmt::format("proposer=\"{}\",position=\"{}\"", escape_label_value(name), i));
    }
  }
  w.header("spec_decode_mean_draft_length", "gauge", "Mean draft tokens per verifying step, since the start.");
  for (const auto& [name, s] : m.spec) {
    w.sample("spec_decode_mean_draft_length",
             s.num_drafts ? static_cast<double>(s.num_draft_tokens) / static_cast<double>(s.num_drafts) : 0.0,
             fmt::format("proposer=\"{}\"", escape_label_value(name)));
  }

  w.histogram("iteration_tokens", m.tokens_per_step, "Tokens per engine step.");
  w.histogram("iteration_sequences", m.seqs_per_step, "Sequences per engine step.");
  w.histogram("request_queue_time_seconds", m.queue_seconds, "Time from arrival to the first scheduled step.");
  w.histogram("time_to_first_token_seconds", m.ttft_seconds, "Time from arrival to the first output token.");
  w.histogram("time_per_output_token_seconds", m.tpot_seconds,
              "Mean time per output token after the first, per request.");
  w.histogram("e2e_request_latency_seconds", m.e2e_seconds, "Time from arrival to the end of the request.");

  std::string& out = w.out();
  out += "# HELP sluice_http_responses_total HTTP responses, by route and status code.\n"
         "# TYPE sluice_http_responses_total counter\n";
  for (const auto& [key, count] : http.responses) {
    out += fmt::format("sluice_http_responses_total{{route=\"{}\",code=\"{}\"}} {}\n", escape_label_value(key.first),
                       key.second, count);
  }
  out += fmt::format(
      "# HELP sluice_http_client_disconnects_total Generations cancelled because the client disconnected.\n"
      "# TYPE sluice_http_client_disconnects_total counter\n"
      "sluice_http_client_disconnects_total {}\n"
      "# HELP sluice_http_slow_client_cancels_total Streams cancelled because the client stopped reading.\n"
      "# TYPE sluice_http_slow_client_cancels_total counter\n"
      "sluice_http_slow_client_cancels_total {}\n"
      "# HELP sluice_http_request_timeouts_total Requests whose headers or body stopped arriving (closed: no answer can be sent).\n"
      "# TYPE sluice_http_request_timeouts_total counter\n"
      "sluice_http_request_timeouts_total {}\n"
      "# HELP sluice_http_write_timeouts_total Connections closed because the client took nothing of an answer for --write-timeout.\n"
      "# TYPE sluice_http_write_timeouts_total counter\n"
      "sluice_http_write_timeouts_total {}\n"
      "# HELP sluice_http_open_connections Open HTTP connections.\n"
      "# TYPE sluice_http_open_connections gauge\n"
      "sluice_http_open_connections {}\n"
      "# HELP sluice_http_buffered_bytes Response bytes queued for clients and not yet written.\n"
      "# TYPE sluice_http_buffered_bytes gauge\n"
      "sluice_http_buffered_bytes {}\n",
      http.client_disconnects, http.slow_client_cancels, http.request_timeouts, http.write_timeouts, http.open_connections,
      http.buffered_bytes);
  return out;
}

}  // namespace sluice::server
