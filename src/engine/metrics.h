// Engine metrics: what `sluice serve` exports on /metrics and `sluice generate` summarizes.
//
// Histograms keep Prometheus-style buckets (upper bounds; counts per bucket plus one overflow
// bucket), a sum and a count, so the exporter writes them as they are.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/request.h"

namespace sluice {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);

  const std::vector<double>& upper_bounds() const { return bounds_; }
  // [upper_bounds.size() + 1]: values <= bound i (and > bound i-1); the last is the overflow.
  const std::vector<int64_t>& bucket_counts() const { return counts_; }
  int64_t count() const { return count_; }
  double sum() const { return sum_; }
  double mean() const { return count_ ? sum_ / static_cast<double>(count_) : 0.0; }

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;
  int64_t count_ = 0;
  double sum_ = 0;
};

// Bucket bounds used by the engine.
std::vector<double> latency_buckets();   // seconds, 1 ms .. 120 s
std::vector<double> count_buckets(int64_t max);  // 1, 2, 4, ... up to max

struct EngineMetrics {
  // Gauges, as of the last step.
  int32_t num_running = 0;
  int32_t num_waiting = 0;
  int32_t kv_blocks_total = 0;
  int32_t kv_blocks_used = 0;    // held by running sequences
  int32_t kv_blocks_free = 0;    // holding nothing
  int32_t kv_blocks_cached = 0;  // held by nobody, kept for the prefix cache until evicted
  int32_t draft_kv_blocks_total = 0;  // the draft model's KV cache (speculative decoding)
  int32_t draft_kv_blocks_used = 0;
  int32_t last_step_tokens = 0;
  int32_t last_step_seqs = 0;
  // Counters.
  int64_t num_steps = 0;
  int64_t num_preemptions = 0;
  int64_t num_requests_submitted = 0;     // accepted by submit()
  int64_t num_requests_rejected = 0;      // refused by submit() (invalid or overloaded)
  int64_t num_requests_overloaded = 0;    // of those, refused because the queue was full
  int64_t num_requests_coalesced = 0;     // served by an identical request's computation
  std::array<int64_t, 4> num_requests_finished{};  // by FinishReason
  int64_t num_prompt_tokens = 0;          // of finished requests
  int64_t num_generation_tokens = 0;      // of finished requests
  int64_t num_scheduled_tokens = 0;       // summed over steps (recomputation included)
  int64_t num_kv_evictions = 0;           // cached blocks evicted for new ones
  // Warm cache hit rate, over the requests that looked the cache up at their first admission
  // (not prompts to score, which are computed in full; nothing with the cache off):
  //   per token   = prefix_cache_hit_tokens / prefix_cache_query_tokens
  //   per request = prefix_cache_hit_requests / prefix_cache_query_requests
  int64_t prefix_cache_query_tokens = 0;
  int64_t prefix_cache_hit_tokens = 0;
  int64_t prefix_cache_query_requests = 0;
  int64_t prefix_cache_hit_requests = 0;
  // Speculative decoding, by proposer (vLLM's spec_decode counters): steps that verified drafts
  // of a sequence, the drafts verified, the accepted ones, and the accepted ones by position
  // (accepted_per_position[i]: drafts at position i + 1 of their step that were accepted).
  struct SpecStats {
    int64_t num_drafts = 0;
    int64_t num_draft_tokens = 0;
    int64_t num_accepted_tokens = 0;
    std::vector<int64_t> accepted_per_position;
  };
  std::map<std::string, SpecStats> spec;
  // Distributions.
  Histogram tokens_per_step{count_buckets(8192)};
  Histogram seqs_per_step{count_buckets(1024)};
  Histogram queue_seconds{latency_buckets()};
  Histogram ttft_seconds{latency_buckets()};
  Histogram tpot_seconds{latency_buckets()};
  Histogram e2e_seconds{latency_buckets()};
};

}  // namespace sluice
