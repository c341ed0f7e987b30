// The replicas a router sends requests to, and what it knows of each: health from its active
// checks (GET /health every interval: `fall` failures in a row mark a replica down, `rise`
// successes mark it up again), passive outlier ejection (`eject_after` connect failures or 5xx in
// a row take it out for eject_base_seconds, doubled at each ejection in a row, capped at
// eject_max_seconds; never more than half the replicas at once; a replica the checks saw go down
// and come back up is a new process and starts clean), and its load: requests the
// router has in flight there (counted by begin()/end(); a health check never touches it) and the
// waiting requests and KV usage it reports on its /metrics.
//
// A replica is available when it is up, not ejected and not draining. A 429 is load, not failure:
// it never counts toward ejection.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/url.h"

namespace sluice::router {

using Clock = std::chrono::steady_clock;

struct BackendConfig {
  std::string name;     // how metrics and logs call it, and its place on the session ring: the URL
  http::Url url;
  std::string api_key;  // sent upstream as a bearer token; empty: the client's Authorization is passed on
};

// Parses "URL" or "URL,key=KEY" (a --backend flag or a line of --backends-file).
Result<BackendConfig> parse_backend(std::string_view text);

struct HealthConfig {
  int fall = 3;                     // failed checks in a row that mark a replica down
  int rise = 2;                     // passed checks in a row that mark it up again
  int eject_after = 5;              // connect failures or 5xx in a row that eject it
  double eject_base_seconds = 10;   // the first ejection; doubled each time, up to:
  double eject_max_seconds = 300;
  double slow_start_seconds = 30;   // a replica back up takes this long to ramp to its full share
};

// What a policy sees of a replica.
struct BackendView {
  int index = 0;
  bool available = false;
  int64_t in_flight = 0;  // requests the router has sent there and not finished
  int64_t waiting = 0;    // waiting requests the replica reported (sluice_num_requests_waiting)
  double kv_usage = 0;    // its KV cache usage, 0..1, as reported
  double ramp = 1;        // slow start: its share, from 0.1 just back up to 1 after slow_start_seconds

  // What the load-aware policies compare: the load as if at full share (a ramping replica looks busier).
  double load() const { return static_cast<double>(in_flight + waiting) / ramp; }
  // Whether it can take one more request under a bounded-load cap (scaled by the ramp, at least 1).
  bool under_cap(int64_t cap) const {
    return static_cast<double>(in_flight) < std::max(1.0, std::ceil(static_cast<double>(cap) * ramp));
  }
};

enum class Outcome { kSuccess, kOverloaded, kFailure, kCancelled };

class BackendPool {
 public:
  BackendPool(std::vector<BackendConfig> backends, HealthConfig health);

  size_t size() const { return configs_.size(); }
  const BackendConfig& config(int i) const { return configs_[i]; }
  std::vector<BackendView> snapshot() const;

  void begin(int i);
  // A request to replica i ended. Failures in a row may eject it.
  void end(int i, Outcome outcome);
  // The result of one active health check.
  void health_check(int i, bool passed);
  void set_reported_load(int i, int64_t waiting, double kv_usage);

  struct Stats {
    std::string name;
    bool up = true;
    bool ejected = false;
    int64_t in_flight = 0;
    int64_t waiting = 0;
    double kv_usage = 0;
    int64_t ejections = 0;
    int64_t health_failures = 0;
  };
  std::vector<Stats> stats() const;
  int num_available() const;

 private:
  struct State {
    bool up = true;
    int checks_in_a_row = 0;   // > 0: passed in a row; < 0: failed in a row
    int failures_in_a_row = 0; // of requests
    int ejections_in_a_row = 0;
    Clock::time_point ejected_until{};
    Clock::time_point up_since{};  // when the checks last saw it come back (slow start)
    int64_t in_flight = 0, waiting = 0;
    double kv_usage = 0;
    int64_t ejections = 0, health_failures = 0;
  };
  bool available(const State& s, Clock::time_point now) const { return s.up && now >= s.ejected_until; }

  const std::vector<BackendConfig> configs_;
  const HealthConfig health_;
  mutable Mutex mu_;
  std::vector<State> states_ SLUICE_GUARDED_BY(mu_);
};

}  // namespace sluice::router
