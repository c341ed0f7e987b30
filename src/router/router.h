// Router (`sluice route`): one OpenAI endpoint over many replicas (sluice serve, vLLM,
// llama.cpp: anything OpenAI-compatible). It speaks HTTP only and never links the engine.
//
//   client --> Router (Beast/Asio; one coroutine per connection, on its own strand)
//                /health /metrics /version      answered here
//                /v1/models                     the union of the available replicas' lists
//                POST /v1/completions, /v1/chat/completions, /tokenize, /detokenize, other /v1/*
//                   -> session key (headers, then the body's `user`) + prompt text
//                   -> policy (policy.h) picks a replica -> the request is relayed upstream;
//                      a streamed answer is relayed event by event as each completes
//                      (nothing is buffered beyond one unfinished event: a client that stops
//                      reading stops the read upstream, and the replica's own backpressure
//                      takes over)
//
// Retries, only while nothing has been written to the client: a connect failure, a connection
// closed before the answer, 502/503/504, or 429 without Retry-After or with one of at most max_retry_after_seconds;
// never the same replica twice, at most max_attempts replicas, after a jittered backoff. Retries
// of an answer (429, 5xx) only while retries in flight stay under retry_budget x requests in
// flight (at least 3, as Envoy's budget): an overloaded replica is not buried under a retry storm;
// a replica that is gone (refused, closed) is always left for another. When no
// replica is left: the last replica's answer, 502 (unreachable) or 504 (timed out); 429 with
// Retry-After when every replica tried was saturated; 503 when none is available at all.
// After a stream started, an upstream failure ends it with an error event (finish_reason
// "error") and [DONE]; it never hangs.
//
// A client that closes its connection while its request is upstream has the upstream connection
// closed at once, which cancels the request on a sluice replica (its KV blocks freed). (A client
// that only half-closes after sending looks the same and is cancelled too.)
//
// Health (backend.h): GET /health on every replica each health_interval_seconds (2xx passes; so
// does 404, a server without the route; a 5xx or no answer fails), and /metrics
// scraped each metrics_interval_seconds for its waiting requests and KV usage (sluice's and
// vLLM's names). Passive ejection on failures in a row.
//
// Usage: every answer's usage.prompt_tokens and cached_tokens are summed per replica (a stream
// is asked for stream_options.include_usage; the usage chunk is taken out again when the client
// had not asked), next to the cached chunks cache_aware predicted: the warm cache hit rate at the
// router, reconciled with its own picture.
//
// Usage groups: the same sums per group of requests, the group being the value of the
// usage_group_header (default X-Session-Group: a tenant, an application, a cohort), else
// "session" for requests with a session key and "none" for the rest; past max_usage_groups
// distinct values, "other". So operators see whose traffic finds the cache warm.
//
// Membership (backend.h) changes while the router runs: DNS discovery (discovery.h) and the
// admin API (router_admin.cc, only with an admin_key):
//   GET  /admin/replicas              every replica: health, load, weight, usage and hit rate
//   POST /admin/replicas              {"url": U, "key"?: K, "weight"?: W}: add one (201)
//   POST /admin/replicas/remove       {"url": U}: gone from routing and listings at once; its
//                                     requests in flight end on their own connections
//   POST /admin/replicas/drain        {"url": U, "drain"?: true|false}: no new requests, still listed
//   POST /admin/replicas/weight       {"url": U, "weight": W}
// A change made there lives as long as the router: a restarted router starts from its flags.
//
// Canary rollouts (rollout.h; with rollout_db, through the admin API, router_rollout_admin.cc):
//   GET  /admin/rollouts                   the current rollout (state, decisions) and the latest ones
//   POST /admin/rollouts                   a rollout spec (JSON): starts it (201); 409 while one runs
//   POST /admin/rollouts/pause|resume|promote|abort   {"reason"?: text}
// While a rollout is loaded, each request goes to one version's replicas (BackendConfig::version):
// the candidate's when its session is assigned there (sticky), else stable's; all to the
// candidate once promoted, all to stable once aborted, until the next rollout. An arm with no
// available replica sends its requests to the rest (counted as errors of that version by the
// analysis, rollout_analysis.h, which compares the versions every interval and, past the
// failureLimit, aborts the rollout with the reason). The rollout's state is saved as it changes,
// so a restarted router resumes it. With several router instances, one runs the rollouts
// (rollout_db) and the others follow it (follow_url): the same spec and state, so the same
// sessions go to the same version everywhere; the analysis runs on the controller's traffic.
//
// Shadow traffic (ShadowConfig in rollout.h; router_shadow.cc): a fraction of requests (or of
// sessions) is copied to the shadow version's replicas once the primary is written to its own,
// and the copy's answer is compared with the primary's (shadow_compare.h) and recorded
// (shadow_store.h), never returned. Copies run on a thread of their own with their own
// connections and timeout; past max_in_flight copies, new ones are dropped and counted, never
// queued; they take no part in the replicas' load, stickiness or the prefix index. A slice may
// also be copied to a second replica of the primary's own version: the noise floor, which a
// candidate's differences are judged against. A running rollout with a `shadow` section copies to
// its candidate, and its analysis judges quality by the comparisons. Without a rollout, the
// replicas of a shadow version in force answer no client: they only get copies.
//   GET  /admin/shadow                     the shadow in force, copies in flight, counts
//   POST /admin/shadow                     {version, fraction, by, noiseFraction, ...}: set it
//   GET  /admin/shadow/report              rates, histograms, agreement over time, the worst
//                                          differing pairs with both outputs (?version=&since=&worst=)
//
// Shutdown (SIGINT/SIGTERM, request_shutdown()): the listener closes, in-flight requests finish
// for up to drain_seconds, then the threads stop.
//
// Thread-safety: the public methods may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "router/backend.h"
#include "router/discovery.h"
#include "router/policy.h"
#include "router/rollout.h"

namespace sluice::router {

struct RouterConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;                 // 0: any free port (see Router::port)
  int threads = 2;
  std::vector<BackendConfig> backends;
  std::vector<DiscoveryConfig> discover;  // DNS names whose addresses are replicas
  double discover_interval_seconds = 10;
  std::string policy = "cache_aware";
  PolicyOptions policy_options;
  HealthConfig health;
  std::string api_key;                  // non-empty: clients must send it (Authorization: Bearer)
  std::string admin_key;                // non-empty: the admin API is on, for this bearer token
  std::string usage_group_header = "X-Session-Group";
  size_t max_usage_groups = 100;
  std::vector<std::string> session_headers{"X-Session-ID", "X-User-ID"};
  size_t max_body_bytes = 8 << 20;      // larger request bodies get 413
  double idle_timeout_seconds = 60;     // a client silent this long (between or inside requests) is closed
  double connect_timeout_seconds = 5;   // to a replica, its name resolved too; also a DNS discovery lookup
  double upstream_timeout_seconds = 600;  // a whole exchange with a replica
  int max_attempts = 3;                 // replicas tried for one request
  double retry_budget = 0.2;            // retries of answers in flight per request in flight
  double max_retry_after_seconds = 1;   // a 429 asking for longer is answered, not retried
  double health_interval_seconds = 5;
  double health_timeout_seconds = 2;
  double metrics_interval_seconds = 5;  // 0: replicas' /metrics not scraped
  double drain_seconds = 30;
  // Canary rollouts (rollout.h): their SQLite store; empty: rollouts are off here.
  std::string rollout_db;
  // Another router that runs the rollouts (its rollout_db): this one follows its current rollout,
  // polling GET follow_url/admin/rollouts with admin_key every follow_interval_seconds, so that
  // every router instance splits traffic alike. Excludes rollout_db.
  std::string follow_url;
  double follow_interval_seconds = 0.5;
  // Shadow traffic (see above); off unless its fraction or noise_fraction is above 0.
  ShadowConfig shadow;
  // Where compared pairs are kept: this file, else rollout_db's, else memory only.
  std::string shadow_db;
  // Runs a rollout's eval suite (AnalysisConfig::eval_suite); without it such rollouts are refused.
  EvalGate eval_gate;
  // Replicas without a version label are labelled by the model id and system_fingerprint they
  // report (GET /v1/models after a passing health check; again every tenth). `sluice route` does.
  bool learn_versions = false;
  // Without a rollout, a request naming a model goes to the replicas whose /v1/models lists it
  // (asked after the first passing health check and every tenth), when any does. `sluice route`
  // does.
  bool route_by_model = false;
};

class Router {
 public:
  // Checks the configuration, binds and listens; routes after start().
  static Result<std::unique_ptr<Router>> create(RouterConfig config);
  ~Router();

  uint16_t port() const;
  void start();
  // Blocks until SIGINT or SIGTERM (or request_shutdown()), then drains and stops.
  void run_until_shutdown();
  void request_shutdown();

  std::string metrics_text() const;
  const BackendPool& backends() const;

  struct Impl;

 private:
  explicit Router(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::router
