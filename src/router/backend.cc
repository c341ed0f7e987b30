#include "router/backend.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include <fmt/format.h>

namespace sluice::router {

std::string_view source_name(Source source) {
  switch (source) {
    case Source::kStatic: return "static";
    case Source::kAdmin: return "admin";
    case Source::kDns: return "dns";
  }
  return "unknown";
}

namespace {

Status check_weight(double weight) {
  if (!(weight >= kMinWeight && weight <= kMaxWeight)) {
    return Status::error(fmt::format("a weight is between {} and {}, got {}", kMinWeight, kMaxWeight, weight),
                         StatusCode::kInvalid);
  }
  return Status();
}

}  // namespace

Result<std::string> backend_name(std::string_view url) {
  auto parsed = http::parse_url(url);
  if (!parsed) return Error(parsed.error());
  return parsed->to_string();
}

std::string without_keys(std::string_view flag) {
  std::string shown(flag);
  for (size_t k = shown.find(",key="); k != std::string::npos; k = shown.find(",key=", k + 5)) {
    const size_t end = shown.find(',', k + 5);
    shown.replace(k + 5, (end == std::string::npos ? shown.size() : end) - (k + 5), "***");
  }
  return shown;
}

Result<BackendConfig> parse_backend(std::string_view text) {
  // Errors name the flag as given, with its keys left out (they end up in logs and answers).
  const std::string shown = without_keys(text);
  BackendConfig c;
  std::vector<std::string_view> seen;
  const size_t comma = text.find(',');
  const std::string_view url = text.substr(0, comma);
  for (std::string_view rest = comma == std::string_view::npos ? "" : text.substr(comma + 1);
       comma != std::string_view::npos;) {
    const size_t next = rest.find(',');
    const std::string_view option = rest.substr(0, next);
    // One of each: a second would silently win.
    const std::string_view name = option.substr(0, option.find('='));
    if (std::ranges::count_if(seen, [&](std::string_view s) { return s == name; }) > 0) {
      return Error(StatusCode::kInvalid, "backend '{}': '{}=' is given twice", shown, name);
    }
    seen.push_back(name);
    if (option.starts_with("key=") && option.size() > 4) {
      c.api_key = std::string(option.substr(4));
    } else if (option.starts_with("weight=")) {
      const std::string_view value = option.substr(7);
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), c.weight);
      if (value.empty() || ec != std::errc() || end != value.data() + value.size()) {
        return Error(StatusCode::kInvalid, "backend '{}': weight '{}' is not a number", shown, value);
      }
      if (Status s = check_weight(c.weight); !s.is_ok())
        return Error(StatusCode::kInvalid, "backend '{}': {}", shown, s.message());
    } else if (option.starts_with("version=") && option.size() > 8) {
      c.version = std::string(option.substr(8));
    } else {
      return Error(StatusCode::kInvalid,
                   "backend '{}': after the URL only ',key=KEY', ',weight=W' and ',version=V' may follow, got '{}'",
                   shown, option);
    }
    if (next == std::string_view::npos) break;
    rest = rest.substr(next + 1);
  }
  auto parsed = http::parse_url(url);
  if (!parsed) return Error(StatusCode::kInvalid, "backend '{}': {}", shown, parsed.error().message());
  if (parsed->tls) {
    return Error(StatusCode::kInvalid,
                 "backend '{}': https replicas are not supported (the router proxies plain HTTP to "
                 "replicas on its own network; terminate TLS in front of the router, not behind it)",
                 shown);
  }
  // The client's path (/v1/...) goes under the URL's path: a prefix for a replica behind a
  // reverse proxy. An OpenAI base URL (.../v1) would make /v1/v1/... and a 404 for everything.
  if (parsed->path == "/v1" || parsed->path.ends_with("/v1")) {
    return Error(StatusCode::kInvalid,
                 "backend '{}': give the replica's server URL without '/v1' (the router sends the client's "
                 "/v1/... path under it, so this would ask for {}/v1/...)",
                 shown, parsed->path);
  }
  c.url = *parsed;
  c.name = c.url.to_string();
  return c;
}

BackendPool::BackendPool(std::vector<BackendConfig> backends, HealthConfig health) : health_(health) {
  for (BackendConfig& c : backends) {
    State s;
    s.weight = c.weight;
    s.config = std::make_shared<const BackendConfig>(std::move(c));
    states_.push_back(std::move(s));
  }
}

size_t BackendPool::size() const {
  MutexLock lock(mu_);
  return states_.size();
}

std::shared_ptr<const BackendConfig> BackendPool::config(int i) const {
  MutexLock lock(mu_);
  return states_[i].config;
}

uint64_t BackendPool::generation(int i) const {
  MutexLock lock(mu_);
  return states_[i].generation;
}

double BackendPool::ramp(const State& s, Clock::time_point now) const {
  if (health_.slow_start_seconds <= 0 || s.up_since == Clock::time_point{}) return 1;
  const double up = std::chrono::duration<double>(now - s.up_since).count();
  return std::clamp(up / health_.slow_start_seconds, 0.1, 1.0);
}

std::vector<BackendView> BackendPool::snapshot() const {
  const auto now = Clock::now();
  MutexLock lock(mu_);
  std::vector<BackendView> views;
  views.reserve(states_.size());
  for (size_t i = 0; i < states_.size(); ++i) {
    const State& s = states_[i];
    views.push_back({static_cast<int>(i), available(s, now), s.in_flight, s.waiting, s.kv_usage, ramp(s, now), s.weight});
  }
  return views;
}

std::vector<Member> BackendPool::members() const {
  MutexLock lock(mu_);
  std::vector<Member> out;
  for (size_t i = 0; i < states_.size(); ++i) {
    if (states_[i].present) out.push_back({static_cast<int>(i), states_[i].config->name, states_[i].weight});
  }
  return out;
}

int BackendPool::find_locked(std::string_view name) const {
  for (size_t i = 0; i < states_.size(); ++i) {
    if (states_[i].present && states_[i].config->name == name) return static_cast<int>(i);
  }
  return -1;
}

int BackendPool::find(std::string_view name) const {
  MutexLock lock(mu_);
  return find_locked(name);
}

Result<int> BackendPool::add(BackendConfig config, bool ramp_up) {
  if (Status s = check_weight(config.weight); !s.is_ok()) return Error(s);
  MutexLock lock(mu_);
  if (find_locked(config.name) >= 0) return Error(StatusCode::kInvalid, "replica {} is there already", config.name);
  // A free slot (removed, nothing in flight) is reused under a new generation.
  size_t slot = states_.size();
  for (size_t i = 0; i < states_.size(); ++i) {
    if (!states_[i].present && states_[i].in_flight == 0) {
      slot = i;
      break;
    }
  }
  State s;
  s.weight = config.weight;
  s.config = std::make_shared<const BackendConfig>(std::move(config));
  if (ramp_up) s.up_since = Clock::now();
  if (slot == states_.size()) {
    states_.push_back(std::move(s));
  } else {
    s.generation = states_[slot].generation + 1;
    states_[slot] = std::move(s);
  }
  return static_cast<int>(slot);
}

Status BackendPool::remove(std::string_view name) {
  MutexLock lock(mu_);
  const int i = find_locked(name);
  if (i < 0) return Status::error(fmt::format("no replica {}", name), StatusCode::kInvalid);
  states_[i].present = false;
  ++states_[i].generation;
  return Status();
}

Status BackendPool::drain(std::string_view name, bool draining) {
  MutexLock lock(mu_);
  const int i = find_locked(name);
  if (i < 0) return Status::error(fmt::format("no replica {}", name), StatusCode::kInvalid);
  states_[i].draining = draining;
  return Status();
}

Status BackendPool::set_weight(std::string_view name, double weight) {
  if (Status s = check_weight(weight); !s.is_ok()) return s;
  MutexLock lock(mu_);
  const int i = find_locked(name);
  if (i < 0) return Status::error(fmt::format("no replica {}", name), StatusCode::kInvalid);
  states_[i].weight = weight;
  return Status();
}

void BackendPool::set_reported_version(int i, std::string version, uint64_t generation) {
  MutexLock lock(mu_);
  State& s = states_[static_cast<size_t>(i)];
  if (!s.present || s.generation != generation || !(s.config->version.empty() || s.config->version_reported) ||
      s.config->version == version) {
    return;
  }
  BackendConfig c = *s.config;
  c.version = std::move(version);
  c.version_reported = true;
  s.config = std::make_shared<const BackendConfig>(std::move(c));
}

uint64_t BackendPool::begin(int i) {
  MutexLock lock(mu_);
  ++states_[i].in_flight;
  return states_[i].generation;
}

void BackendPool::end(int i, Outcome outcome) {
  const auto now = Clock::now();
  std::string event;
  {
    MutexLock lock(mu_);
    State& s = states_[i];
    --s.in_flight;
    if (!s.present) return;  // removed meanwhile: its health is nobody's concern now
    if (outcome == Outcome::kSuccess) {
      s.failures_in_a_row = 0;
      if (now >= s.ejected_until) s.ejections_in_a_row = 0;
      return;
    }
    if (outcome != Outcome::kFailure || ++s.failures_in_a_row < health_.eject_after) return;
    // At most half the replicas present ejected at once.
    size_t ejected = 0, present = 0;
    for (const State& o : states_) {
      present += o.present;
      ejected += o.present && now < o.ejected_until;
    }
    if (now < s.ejected_until || 2 * (ejected + 1) > present) return;
    const double seconds =
        std::min(health_.eject_max_seconds, health_.eject_base_seconds * std::pow(2.0, s.ejections_in_a_row));
    s.ejected_until = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    ++s.ejections_in_a_row;
    ++s.ejections;
    event = fmt::format("replica {}: ejected for {:g} s after {} failed requests in a row", s.config->name, seconds,
                        s.failures_in_a_row);
    s.failures_in_a_row = 0;
  }
  if (on_event_) on_event_(event);
}

void BackendPool::health_check(int i, bool passed, std::optional<uint64_t> generation) {
  std::string event;
  {
    MutexLock lock(mu_);
    State& s = states_[i];
    if (generation && *generation != s.generation) return;
    if (passed) {
      s.checks_in_a_row = std::max(0, s.checks_in_a_row) + 1;
      if (!s.up && s.checks_in_a_row >= health_.rise) {
        // Seen down and up again: a new process, whatever ejected the old one.
        s.up = true;
        s.up_since = Clock::now();
        s.ejected_until = {};
        s.ejections_in_a_row = 0;
        s.failures_in_a_row = 0;
        event = fmt::format("replica {}: up ({} health checks passed in a row)", s.config->name, s.checks_in_a_row);
      }
    } else {
      ++s.health_failures;
      s.checks_in_a_row = std::min(0, s.checks_in_a_row) - 1;
      if (s.up && -s.checks_in_a_row >= health_.fall) {
        s.up = false;
        event = fmt::format("replica {}: down ({} health checks failed in a row)", s.config->name, -s.checks_in_a_row);
      }
    }
  }
  if (on_event_ && !event.empty()) on_event_(event);
}

void BackendPool::set_reported_load(int i, int64_t waiting, double kv_usage, std::optional<uint64_t> generation) {
  MutexLock lock(mu_);
  if (generation && *generation != states_[i].generation) return;
  states_[i].waiting = waiting;
  states_[i].kv_usage = kv_usage;
}

std::vector<BackendPool::Stats> BackendPool::stats() const {
  const auto now = Clock::now();
  MutexLock lock(mu_);
  std::vector<Stats> out;
  for (size_t i = 0; i < states_.size(); ++i) {
    const State& s = states_[i];
    if (!s.present) continue;
    out.push_back({s.config->name, s.config->source, s.weight, ramp(s, now), s.up,
                   now < s.ejected_until, s.draining, s.in_flight, s.waiting, s.kv_usage, s.ejections,
                   s.health_failures, s.config->version});
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
