// The replicas a router sends requests to, and what it knows of each: health from its active
// checks (GET /health every interval: `fall` failures in a row mark a replica down, `rise`
// successes mark it up again), passive outlier ejection (`eject_after` connect failures or 5xx in
// a row take it out for eject_base_seconds, doubled at each ejection in a row, capped at
// eject_max_seconds; never more than half the replicas at once; a replica the checks saw go down
// and come back up is a new process and starts clean), its weight (its share of requests
// relative to the others), and its load: requests the router has in flight there (counted by
// begin()/end(); a health check never touches it) and the waiting requests and KV usage it
// reports on its /metrics.
//
// Membership changes while the router runs (the admin API, DNS discovery): add() puts a replica
// in a slot (up at once, as a static one: a wrong address is found by its failures and health
// checks), remove() takes it out of routing and out of every listing at once (its requests in
// flight finish on their own connections) and frees the slot once nothing is in flight there,
// drain() keeps it listed and checked but sends it nothing new. Slots are indices: a policy, a health loop or a request
// holds an index, so a freed slot is reused only under a new generation (a health loop of the
// old one sees the change and stops), and the number of slots stays bounded by the most replicas
// ever present at once plus those still finishing requests.
//
// A replica is available when it is present, up, not ejected and not draining. A 429 is load,
// not failure: it never counts toward ejection.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "common/url.h"

namespace sluice::router {

using Clock = std::chrono::steady_clock;

// How a replica came to be in the pool.
enum class Source { kStatic, kAdmin, kDns };
std::string_view source_name(Source source);  // "static", "admin", "dns"

struct BackendConfig {
  std::string name;     // how metrics and logs call it, and its place on the session ring: the URL
  http::Url url;
  std::string api_key;  // sent upstream as a bearer token; empty: the client's Authorization is passed on
  double weight = 1;    // its share relative to the others (kMinWeight..kMaxWeight)
  Source source = Source::kStatic;
  std::string version;  // its version label, which canary rollouts split traffic by (rollout.h); "" none
  // The label is what the replica reports (its model id and system_fingerprint, GET /v1/models),
  // learnt by the health checks, rather than given by the flag or the admin API.
  bool version_reported = false;
};
inline constexpr double kMinWeight = 0.01, kMaxWeight = 100;

// A --backend or --discover flag as errors show it: each ",key=..." value replaced by ***.
std::string without_keys(std::string_view flag);
// Parses "URL[,key=KEY][,weight=W][,version=V]" (a --backend flag or a line of --backends-file).
Result<BackendConfig> parse_backend(std::string_view text);
// The pool's name of a URL as a client may write it ("http://h:1/" and "http://h:1" alike).
Result<std::string> backend_name(std::string_view url);

struct HealthConfig {
  int fall = 3;                     // failed checks in a row that mark a replica down
  int rise = 2;                     // passed checks in a row that mark it up again
  int eject_after = 5;              // connect failures or 5xx in a row that eject it
  double eject_base_seconds = 10;   // the first ejection; doubled each time, up to:
  double eject_max_seconds = 300;
  double slow_start_seconds = 30;   // a replica back up takes this long to ramp to its full share
};

// What a policy sees of a replica (one per slot; a free slot is never available).
struct BackendView {
  int index = 0;
  bool available = false;
  int64_t in_flight = 0;  // requests the router has sent there and not finished
  int64_t waiting = 0;    // waiting requests the replica reported (sluice_num_requests_waiting)
  double kv_usage = 0;    // its KV cache usage, 0..1, as reported
  double ramp = 1;        // slow start: its share, from 0.1 just back up to 1 after slow_start_seconds
  double weight = 1;      // its configured share relative to the others

  double share() const { return ramp * weight; }
  // What the load-aware policies compare: the load per unit of share (a ramping or light replica
  // looks busier).
  double load() const { return static_cast<double>(in_flight + waiting) / share(); }
  // Whether it can take one more request under a bounded-load cap given per unit of weight
  // (policy.h: load_cap): the cap times its share, at least 1.
  bool under_cap(double cap_per_weight) const {
    return static_cast<double>(in_flight) < std::max(1.0, std::ceil(cap_per_weight * share() - 1e-9));
  }
};

// A replica in the routing set, as the ring-building policies see it.
struct Member {
  int index = 0;
  std::string name;
  double weight = 1;
};

enum class Outcome { kSuccess, kOverloaded, kFailure, kCancelled };

class BackendPool {
 public:
  BackendPool(std::vector<BackendConfig> backends, HealthConfig health);

  // Called with a line for each change of a replica's health an operator wants in the log (down,
  // up again, ejected), outside the pool's lock. Set before the pool is used from more threads.
  using EventFn = std::function<void(const std::string&)>;
  void set_on_event(EventFn fn) { on_event_ = std::move(fn); }

  // Slots, present or free: indices run 0..size()-1.
  size_t size() const;
  // The configuration of slot i (a free slot: its last replica's).
  std::shared_ptr<const BackendConfig> config(int i) const;
  // The slot's generation: changes when its replica is removed or the slot reused.
  uint64_t generation(int i) const;
  std::vector<BackendView> snapshot() const;
  // The replicas present (draining or not), in slot order.
  std::vector<Member> members() const;

  // Membership. add(): the slot it took, or an error (already present, or a bad weight);
  // `ramp`: slow start from a tenth of its share, as for a replica back up.
  Result<int> add(BackendConfig config, bool ramp);
  // The slot of a present replica, or -1.
  int find(std::string_view name) const;
  Status remove(std::string_view name);
  Status drain(std::string_view name, bool draining);
  Status set_weight(std::string_view name, double weight);
  // A reported version label (BackendConfig::version_reported) for slot i, while it holds the
  // replica of `generation`; a label given by the flag or the admin API is kept.
  void set_reported_version(int i, std::string version, uint64_t generation);

  // A request goes to replica i: counted in flight. Returns the slot's generation, read under the
  // same lock, for the request to tell later whether its replica is still there.
  uint64_t begin(int i);
  // A request to replica i ended. Failures in a row may eject it.
  void end(int i, Outcome outcome);
  // The result of one active health check.
  // The result of one active health check, or of a /metrics scrape; dropped when `generation` (of
  // the replica the check was for) is no longer the slot's.
  void health_check(int i, bool passed, std::optional<uint64_t> generation = {});
  void set_reported_load(int i, int64_t waiting, double kv_usage, std::optional<uint64_t> generation = {});

  // Of the replicas present, in slot order.
  struct Stats {
    std::string name;
    Source source = Source::kStatic;
    double weight = 1;
    double ramp = 1;
    bool up = true;
    bool ejected = false;
    bool draining = false;
    int64_t in_flight = 0;
    int64_t waiting = 0;
    double kv_usage = 0;
    int64_t ejections = 0;
    int64_t health_failures = 0;
    std::string version;
  };
  std::vector<Stats> stats() const;
  int num_available() const;

 private:
  struct State {
    std::shared_ptr<const BackendConfig> config;
    bool present = true;
    bool draining = false;
    double weight = 1;
    uint64_t generation = 0;
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
  bool available(const State& s, Clock::time_point now) const {
    return s.present && !s.draining && s.up && now >= s.ejected_until;
  }
  double ramp(const State& s, Clock::time_point now) const;
  int find_locked(std::string_view name) const SLUICE_REQUIRES(mu_);

  const HealthConfig health_;
  EventFn on_event_;
  mutable Mutex mu_;
  std::vector<State> states_ SLUICE_GUARDED_BY(mu_);
};

}  // namespace sluice::router
