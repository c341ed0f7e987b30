#include "router/backend.h"

#include <algorithm>
#include <cmath>

namespace sluice::router {

Result<BackendConfig> parse_backend(std::string_view text) {
  BackendConfig c;
  std::string_view url = text;
  if (const size_t comma = text.find(','); comma != std::string_view::npos) {
    url = text.substr(0, comma);
    const std::string_view option = text.substr(comma + 1);
    if (!option.starts_with("key=") || option.size() == 4) {
      return Error(StatusCode::kInvalid, "backend '{}': after the URL only ',key=KEY' may follow, got '{}'", text,
                   option);
    }
    c.api_key = std::string(option.substr(4));
  }
  auto parsed = http::parse_url(url);
  if (!parsed) return Error(StatusCode::kInvalid, "backend '{}': {}", text, parsed.error().message());
  c.url = *parsed;
  c.name = c.url.to_string();
  return c;
}

BackendPool::BackendPool(std::vector<BackendConfig> backends, HealthConfig health)
    : configs_(std::move(backends)), health_(health), states_(configs_.size()) {}

std::vector<BackendView> BackendPool::snapshot() const {
  const auto now = Clock::now();
  MutexLock lock(mu_);
  std::vector<BackendView> views;
  views.reserve(states_.size());
  for (size_t i = 0; i < states_.size(); ++i) {
    const State& s = states_[i];
    double ramp = 1;
    if (health_.slow_start_seconds > 0 && s.up_since != Clock::time_point{}) {
      const double up = std::chrono::duration<double>(now - s.up_since).count();
      ramp = std::clamp(up / health_.slow_start_seconds, 0.1, 1.0);
    }
    views.push_back({static_cast<int>(i), available(s, now), s.in_flight, s.waiting, s.kv_usage, ramp});
  }
  return views;
}

void BackendPool::begin(int i) {
  MutexLock lock(mu_);
  ++states_[i].in_flight;
}

void BackendPool::end(int i, Outcome outcome) {
  const auto now = Clock::now();
  MutexLock lock(mu_);
  State& s = states_[i];
  --s.in_flight;
  if (outcome == Outcome::kSuccess) {
    s.failures_in_a_row = 0;
    if (now >= s.ejected_until) s.ejections_in_a_row = 0;
    return;
  }
  if (outcome != Outcome::kFailure || ++s.failures_in_a_row < health_.eject_after) return;
  // At most half the replicas ejected at once.
  size_t ejected = 0;
  for (const State& o : states_) ejected += now < o.ejected_until;
  if (now < s.ejected_until || 2 * (ejected + 1) > states_.size()) return;
  const double seconds =
      std::min(health_.eject_max_seconds, health_.eject_base_seconds * std::pow(2.0, s.ejections_in_a_row));
  s.ejected_until = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  ++s.ejections_in_a_row;
  ++s.ejections;
  s.failures_in_a_row = 0;
}

void BackendPool::health_check(int i, bool passed) {
  MutexLock lock(mu_);
  State& s = states_[i];
  if (passed) {
    s.checks_in_a_row = std::max(0, s.checks_in_a_row) + 1;
    if (!s.up && s.checks_in_a_row >= health_.rise) {
      // Seen down and up again: a new process, whatever ejected the old one.
      s.up = true;
      s.up_since = Clock::now();
      s.ejected_until = {};
      s.ejections_in_a_row = 0;
      s.failures_in_a_row = 0;
    }
  } else {
    ++s.health_failures;
    s.checks_in_a_row = std::min(0, s.checks_in_a_row) - 1;
    if (s.up && -s.checks_in_a_row >= health_.fall) s.up = false;
  }
}

void BackendPool::set_reported_load(int i, int64_t waiting, double kv_usage) {
  MutexLock lock(mu_);
  states_[i].waiting = waiting;
  states_[i].kv_usage = kv_usage;
}

std::vector<BackendPool::Stats> BackendPool::stats() const {
  const auto now = Clock::now();
  MutexLock lock(mu_);
  std::vector<Stats> out;
  for (size_t i = 0; i < states_.size(); ++i) {
    const State& s = states_[i];
    out.push_back({configs_[i].name, s.up, now < s.ejected_until, s.in_flight, s.waiting, s.kv_usage, s.ejections,
                   s.health_failures});
  }
  return out;
}

int BackendPool::num_available() const {
  const auto now = Clock::now();
  MutexLock lock(mu_);
  int n = 0;
  for (const State& s : states_) n += available(s, now);
  return n;
}

}  // namespace sluice::router
