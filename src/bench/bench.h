// sluice bench: a load generator for any OpenAI-compatible server (sluice serve, vLLM,
// llama.cpp's server). It speaks HTTP only and never links the engine.
//
// A run sends `warmup` requests that are not counted (closed loop at `concurrency`, or at
// `max_concurrency` or 1 for an open-loop run), then the measured requests of a workload
// (workload.h) in one of two loops:
//   closed loop  `concurrency` clients, each sending its next request when the last one ended;
//   open loop    requests arrive at `rate` per second, Poisson (exponential gaps from the seed),
//                whether or not earlier ones have ended, at most `max_concurrency` in flight
//                (an arrival over the cap waits for a free slot; 0 = no cap). The first request
//                goes at once. An arrival with no request ready (chat: every session left is
//                waiting for an answer) waits for one.
// Sending stops at whichever comes first: `num_requests` sent, `duration_s` elapsed, or the
// workload run out; requests in flight then finish, for at most `drain_timeout_s` after a
// duration ends, after which they are cancelled (and counted as errors of kind "cancelled").
// With `stop_on_signal`, SIGINT or SIGTERM (Ctrl-C) stops the run the same way at once: nothing
// more is sent, requests in flight are cancelled, and the report covers what ended
// (BenchReport::interrupted); a second signal ends the process.
//
// Everything runs on one thread and one io_context with asynchronous sockets (C++20 coroutines)
// rather than a thread per client with blocking Beast: an open loop at a high rate holds hundreds
// of connections, which then cost no threads, and the workload, counters and records need no
// locks. The price is that parsing one chunk delays the reading of the next; a chunk's JSON takes
// microseconds, well below the latencies measured.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/stats.h"
#include "bench/stream_request.h"
#include "bench/workload.h"
#include "common/status.h"

namespace sluice::bench {

struct BenchConfig {
  // The server's API root: "http://HOST:PORT" means "http://HOST:PORT/v1"; a URL with a path
  // ("http://HOST:PORT/v1", "http://HOST/openai/v1") is used as it is.
  std::string url = "http://127.0.0.1:8000";
  std::string model;    // empty: the first model of GET /models
  std::string api_key;  // empty: no Authorization header
  WorkloadConfig workload;
  int32_t concurrency = 1;      // closed loop (when rate == 0)
  double rate = 0;              // open loop: requests per second; 0 = closed loop
  int32_t max_concurrency = 0;  // open loop: at most this many in flight; 0 = no cap
  int64_t num_requests = 0;     // 0: no count bound
  double duration_s = 0;        // 0: no time bound
  int32_t warmup = 0;
  double request_timeout_s = 300;
  double drain_timeout_s = 30;
  bool ignore_eos = true;
  double temperature = 0;
  nlohmann::json extra_body = nlohmann::json::object();
  bool stop_on_signal = false;  // SIGINT/SIGTERM end the run with a report (the command line's)
};

// Says what is wrong with a configuration, in terms of the command's flags.
Status validate(const BenchConfig& config);

// Where a run is, for a progress display.
struct Progress {
  int64_t num_done = 0;
  int64_t num_total = -1;  // -1: bounded by time or by nothing known in advance
  int64_t num_errors = 0;
  int64_t num_in_flight = 0;
  int64_t output_tokens = 0;
  double elapsed_s = 0;
  double duration_s = 0;  // the time bound, 0 if none
  bool warmup = false;
};
using ProgressFn = std::function<void(const Progress&)>;

struct ErrorSummary {
  std::string kind;
  int64_t count = 0;
  std::string sample;  // the first message of this kind
};

struct Summary {
  int64_t num_requests = 0;
  int64_t num_ok = 0;
  int64_t num_errors = 0;
  double duration_s = 0;  // from the start of the run to the end of its last request
  double requests_per_s = 0;       // successful requests
  double output_tokens_per_s = 0;  // of successful requests
  double total_tokens_per_s = 0;   // prompt + output, of successful requests
  int64_t prompt_tokens = 0;  // usage.prompt_tokens, else the generated count
  int64_t output_tokens = 0;
  Distribution ttft_ms, tpot_ms, itl_ms, e2e_ms;
  // Cached prompt tokens over the requests whose usage reported them; unknown when none did.
  int64_t num_with_cache_info = 0;
  int64_t cached_tokens = 0;
  int64_t cache_info_prompt_tokens = 0;
  std::optional<double> cached_fraction;
  double tokens_per_chunk = 0;  // output tokens / token chunks, of requests whose usage counted them
  int64_t num_without_usage = 0;  // successful requests whose stream had no usage
  std::vector<ErrorSummary> errors;  // most frequent first
};

struct BenchReport {
  BenchConfig config;  // as run: the model resolved, bounds filled in
  std::string api_url;  // the API root requests went to
  std::vector<RequestRecord> records;  // measured requests in the order they were sent
  Summary summary;
  int interrupted_by = 0;  // the signal that stopped the run (stop_on_signal); records hold what was sent
  std::string gave_up;     // non-empty: the run stopped sending because the server went away (why)
  int64_t workload_size = -1;  // set when the workload holds fewer requests than --num-requests asked
};

// Runs the benchmark. Fails (before sending load) on a bad configuration, or when the model is not
// given and GET /models fails; failed requests are in the report, not an error.
Result<BenchReport> run(const BenchConfig& config, const ProgressFn& progress = {});

}  // namespace sluice::bench
