// Shadow traffic in the router (router.h): which requests are copied and where, the copies sent
// on the router's shadow thread, the primary's answer kept for them, each pair compared and
// recorded, and the admin routes.
#include <algorithm>
#include <cmath>
#include <map>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/steady_timer.hpp>

#include "router/router_impl.h"

namespace sluice::router {

// One copy of a request, from its planning to its recorded comparison. The primary's answer
// and the shadow's arrive in either order, on different threads; the second completes it.
struct ShadowExchange {
  ShadowPair pair;          // what is recorded (answers filled in as they come)
  std::string body;         // the copy's body: not streamed, with logprobs
  std::string authorization;
  int exclude = -1;         // the noise arm: not the primary's own replica
  bool sampled = false;
  ShadowConfig config;
  bool rollout = false;     // a rollout's shadow: the pair counts in its analysis
  Mutex mu;
  bool primary_done SLUICE_GUARDED_BY(mu) = false, shadow_done SLUICE_GUARDED_BY(mu) = false;
};

namespace {

// A copy's body: the same request, answered whole (a stream's events would only be joined
// again) and with the sampled tokens' logprobs, so that the comparison knows the shadow's tokens.
std::optional<std::string> shadow_body(const Json& body, bool chat) {
  if (!body.is_object()) return std::nullopt;
  Json copy = body;
  copy["stream"] = false;
  copy.erase("stream_options");
  if (chat) {
    if (!copy.contains("logprobs") || !copy["logprobs"].is_boolean() || !copy["logprobs"].get<bool>()) {
      copy["logprobs"] = true;
      copy.erase("top_logprobs");
    }
  } else if (!copy.contains("logprobs") || copy["logprobs"].is_null()) {
    copy["logprobs"] = 0;
  }
  return copy.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// The value of `key` in a target's query string ("" when absent); %XX and '+' decoded.
std::string query_value(std::string_view target, std::string_view key) {
  const size_t q = target.find('?');
  if (q == std::string_view::npos) return {};
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view kv = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    const size_t eq = kv.find('=');
    if (kv.substr(0, eq) != key) continue;
    const std::string_view raw = eq == std::string_view::npos ? std::string_view() : kv.substr(eq + 1);
    std::string out;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '+') {
        out += ' ';
      } else if (raw[i] == '%' && i + 2 < raw.size() && std::isxdigit(static_cast<unsigned char>(raw[i + 1])) &&
                 std::isxdigit(static_cast<unsigned char>(raw[i + 2]))) {
        out += static_cast<char>(std::stoi(std::string(raw.substr(i + 1, 2)), nullptr, 16));
        i += 2;
      } else {
        out += raw[i];
      }
    }
    return out;
  }
  return {};
}

}  // namespace

Status Router::Impl::open_shadow() {
  {
    MutexLock lock(shadow_mu);
    shadow_config = config.shadow;
  }
  const std::string path = !config.shadow_db.empty() ? config.shadow_db : !config.rollout_db.empty() ? config.rollout_db : ":memory:";
  auto store = ShadowStore::open(path);
  if (!store) return store.error();
  shadow_store = std::move(*store);
  return Status::ok();
}

std::optional<ShadowConfig> Router::Impl::active_shadow(bool* from_rollout) {
  if (from_rollout) *from_rollout = false;
  {
    MutexLock lock(rollout_mu);
    if (rollout && !rollout->finished() && rollout->spec().shadow.enabled()) {
      ShadowConfig c = rollout->spec().shadow;
      c.version = rollout->spec().candidate;
      if (from_rollout) *from_rollout = true;
      return c;
    }
  }
  MutexLock lock(shadow_mu);
  if (!shadow_config.enabled()) return std::nullopt;
  return shadow_config;
}

void Router::Impl::start_shadows(Exchange& x, int backend) {
  if (x.req.method() != bhttp::verb::post || !x.parsed_body || !x.parsed_body->is_object()) return;
  const std::string target(x.req.target());
  const bool chat = target.starts_with("/v1/chat/completions");
  if (!chat && !target.starts_with("/v1/completions")) return;
  bool from_rollout = false;
  const std::optional<ShadowConfig> shadow = active_shadow(&from_rollout);
  if (!shadow) return;
  const std::shared_ptr<const BackendConfig> primary = pool.config(backend);
  uint64_t r1 = 0, r2 = 0;
  {
    MutexLock lock(rng_mu);
    r1 = rng(), r2 = rng();
  }
  // The candidate arm copies requests the shadow version did not answer itself; the noise arm,
  // to another replica of the version that did.
  std::vector<std::pair<std::string, std::string>> arms;  // (arm, version)
  const bool on_shadow_version = !shadow->version.empty() && primary->version == shadow->version;
  if (!shadow->version.empty() && !on_shadow_version &&
      mirrored(x.session_key, r1, shadow->fraction, shadow->by_session)) {
    arms.emplace_back("candidate", shadow->version);
  }
  if (!on_shadow_version && mirrored(x.session_key, r2, shadow->noise_fraction, shadow->by_session)) {
    arms.emplace_back("noise", primary->version);
  }
  if (arms.empty()) return;
  const std::optional<std::string> body = shadow_body(*x.parsed_body, chat);
  if (!body) return;
  for (const auto& [arm, version] : arms) {
    if (shadow_in_flight.load() >= shadow->max_in_flight) {
      with_metrics([&](Metrics& m) { ++m.shadow_dropped["overflow"]; });
      continue;
    }
    shadow_in_flight.fetch_add(1);
    auto s = std::make_shared<ShadowExchange>();
    s->pair.at = epoch_now();
    s->pair.arm = arm;
    s->pair.primary_version = primary->version;
    s->pair.shadow_version = version;
    s->pair.primary_replica = primary->name;
    s->pair.target = target.substr(0, target.find('?'));
    s->pair.request = x.req.body();
    s->body = *body;
    s->authorization = std::string(x.req[bhttp::field::authorization]);
    s->exclude = arm == "noise" ? backend : -1;
    s->sampled = sampled_without_seed(*x.parsed_body);
    s->config = *shadow;
    s->rollout = from_rollout;
    x.shadows.push_back(s);
    net::co_spawn(shadow_ioc, run_shadow(s), net::detached);
  }
  x.capture = !x.shadows.empty() && x.stream;
}

void Router::Impl::finish_primary(Exchange& x, int status, const std::string& body) {
  if (x.shadows.empty()) return;
  if (torn_down.load()) {  // a frame destroyed with the router: shadow_ioc may be gone, nothing compares now
    x.shadows.clear();
    return;
  }
  ShadowAnswer answer;
  if (x.capture_overflow) {
    answer.status = status;
    answer.error = "the primary's stream was too long to keep";
  } else if (status != 0) {
    answer = read_answer(status, x.stream && status / 100 == 2 ? std::string_view(x.captured) : std::string_view(body),
                         x.stream && status / 100 == 2);
  } else {
    answer.error = "no answer reached the client";
  }
  for (const std::shared_ptr<ShadowExchange>& s : x.shadows) {
    bool complete = false;
    {
      MutexLock lock(s->mu);
      s->pair.primary = answer;
      s->primary_done = true;
      complete = s->shadow_done;
    }
    if (complete) net::post(shadow_ioc, [this, s] { complete_shadow(*s); });
  }
  x.shadows.clear();
  x.captured.clear();
}

net::awaitable<void> Router::Impl::run_shadow(std::shared_ptr<ShadowExchange> s) {
  // A replica of the arm's version, in turn; not counted in the replicas' load, the policy's
  // picture or its prefix index: a copy changes nothing on the primary path.
  std::shared_ptr<const BackendConfig> target;
  {
    std::vector<int> choices;
    for (const BackendView& v : pool.snapshot()) {
      if (v.available && v.index != s->exclude && pool.config(v.index)->version == s->pair.shadow_version) {
        choices.push_back(v.index);
      }
    }
    if (!choices.empty()) target = pool.config(choices[shadow_next.fetch_add(1) % choices.size()]);
  }
  ShadowAnswer answer;
  if (!target) {
    answer.error = fmt::format("no available replica of version '{}'", s->pair.shadow_version);
  } else {
    http::HttpOptions options;
    options.connect_timeout = ms(std::min(config.connect_timeout_seconds, s->config.timeout_seconds));
    options.request_timeout = ms(s->config.timeout_seconds);
    http::HttpConnection connection(co_await net::this_coro::executor, target->url, options);
    http::HttpRequest req;
    req.method = "POST";
    req.target = target->url.path + s->pair.target;
    req.body = s->body;
    req.headers.push_back({"Content-Type", "application/json"});
    if (!target->api_key.empty()) {
      req.headers.push_back({"Authorization", "Bearer " + target->api_key});
    } else if (!s->authorization.empty()) {
      req.headers.push_back({"Authorization", s->authorization});
    }
    auto r = co_await connection.request(req);
    if (r) {
      answer = read_answer(r->status, r->body, false);
    } else {
      answer.status = r.error().status;
      answer.error = r.error().kind == http::ErrorKind::kStatus ? fmt::format("HTTP {}", r.error().status)
                                                                 : std::string(http::error_kind_name(r.error().kind));
    }
  }
  shadow_in_flight.fetch_sub(1);
  if (!target) with_metrics([](Metrics& m) { ++m.shadow_dropped["no_replica"]; });
  bool complete = false;
  {
    MutexLock lock(s->mu);
    if (target) {
      s->pair.shadow = std::move(answer);
      s->pair.shadow_replica = target->name;
    } else {
      s->pair.shadow_version.clear();  // nothing to record
    }
    s->shadow_done = true;
    complete = s->primary_done;
  }
  if (complete) complete_shadow(*s);
}

void Router::Impl::complete_shadow(ShadowExchange& s) {
  ShadowPair pair;
  {
    MutexLock lock(s.mu);
    pair = s.pair;
  }
  if (pair.shadow_version.empty()) return;  // dropped: no replica
  if (!pair.primary.ok) {
    with_metrics([](Metrics& m) { ++m.shadow_dropped["primary_failed"]; });
    return;
  }
  if (pair.shadow.ok) pair.comparison = compare_answers(pair.primary, pair.shadow, s.sampled);
  const bool agrees = pair.shadow.ok && pair.comparison.agrees;
  const std::string result = !pair.shadow.ok ? "shadow_error" : agrees ? "agree" : "disagree";
  with_metrics([&](Metrics& m) { ++m.shadow_pairs[{pair.arm, result}]; });
  if (s.rollout && rollout_store) {
    // A rollout's analysis judges the candidate's quality by these (rollout_analysis.h).
    MutexLock lock(rollout_mu);
    if (rollout && !rollout->finished()) {
      if (pair.arm == "noise" && pair.shadow_version == rollout->spec().stable) {
        ++shadow_window.noise_pairs;
        shadow_window.noise_disagreements += !agrees;
      } else if (pair.arm == "candidate" && pair.shadow_version == rollout->spec().candidate) {
        ++shadow_window.pairs;
        shadow_window.disagreements += !agrees;
      }
    }
  }
  if (Status st = shadow_store->record(pair, s.config.retention); !st) {
    fmt::print(stderr, "sluice route: {}\n", st.message());
  }
}

Json Router::Impl::shadow_status() {
  bool from_rollout = false;
  const std::optional<ShadowConfig> active = active_shadow(&from_rollout);
  Json out = Json::object();
  out["active"] = active ? Json::parse(to_json(*active).dump()) : Json(nullptr);
  out["source"] = !active ? Json(nullptr) : Json(from_rollout ? "rollout" : "router");
  out["in_flight"] = shadow_in_flight.load();
  with_metrics([&](Metrics& m) {
    Json pairs = Json::object(), dropped = Json::object();
    for (const auto& [k, n] : m.shadow_pairs) pairs[k.first][k.second] = n;
    for (const auto& [k, n] : m.shadow_dropped) dropped[k] = n;
    out["pairs"] = pairs;
    out["dropped"] = dropped;
  });
  return out;
}

Json Router::Impl::shadow_report(const ShadowReportOptions& options, std::string* error) {
  auto report = shadow_store->report(options);
  if (!report) {
    if (error) *error = report.error().message();
    return nullptr;
  }
  Json out = shadow_status();
  for (auto& [k, v] : report->items()) out[k] = std::move(v);
  return out;
}

net::awaitable<Json> Router::Impl::shadow_report_off_thread(ShadowReportOptions options, std::string* error) {
  // Computed on the shadow thread; the caller's strand is woken by cancelling a timer there
  // (posted to it, so the wake-up cannot come before the wait).
  struct Shared {
    explicit Shared(const net::any_io_executor& ex) : done(ex, net::steady_timer::time_point::max()) {}
    Json report;
    std::string error;
    net::steady_timer done;
  };
  auto shared = std::make_shared<Shared>(co_await net::this_coro::executor);
  net::post(shadow_ioc, [this, options, shared] {
    shared->report = shadow_report(options, &shared->error);
    net::post(shared->done.get_executor(), [shared] { shared->done.cancel(); });
  });
  co_await shared->done.async_wait(kTuple);
  if (error) *error = shared->error;
  co_return std::move(shared->report);
}

net::awaitable<bool> Router::Impl::admin_shadow(beast::tcp_stream& client, bhttp::request<bhttp::string_body>& req,
                                                std::string_view path, bool keep) {
  auto bad = [](std::string message) { return error_body(message, "invalid_request_error"); };
  const bool get = req.method() == bhttp::verb::get || req.method() == bhttp::verb::head,
             post = req.method() == bhttp::verb::post;
  auto state = [&] { return shadow_status(); };
  if (path == "/admin/shadow/report") {
    if (!get) {
      Headers allow;  // RFC 9110 15.5.6: a 405 lists the methods the route takes
      allow.emplace_back("Allow", "GET, HEAD");
      co_return co_await reply(req, client, 405, bad("/admin/shadow/report takes GET"), keep, "application/json",
                               &allow);
    }
    ShadowReportOptions o;
    o.version = query_value(req.target(), "version");
    const std::string since = query_value(req.target(), "since"), worst = query_value(req.target(), "worst");
    const std::string bucket = query_value(req.target(), "bucket");
    bool parsed = true;  // each value whole (a bad one is not read as 0)
    auto number = [&](const std::string& text, double fallback) {
      if (text.empty()) return fallback;
      char* end = nullptr;
      const double v = std::strtod(text.c_str(), &end);
      parsed = parsed && *end == '\0';
      return v;
    };
    o.since = number(since, o.since);
    const double worst_n = number(worst, o.worst);
    o.bucket_seconds = number(bucket, o.bucket_seconds);
    if (!parsed || !(worst_n >= 0 && worst_n <= 1000) || worst_n != std::floor(worst_n) || !(o.bucket_seconds > 0) ||
        !std::isfinite(o.since) || !std::isfinite(o.bucket_seconds)) {
      co_return co_await reply(req, client, 400,
                               bad("query: since=SECONDS_SINCE_EPOCH, worst=0..1000, bucket=SECONDS (> 0), version=V"),
                               keep);
    }
    o.worst = static_cast<int32_t>(worst_n);
    std::string error;
    const Json out = co_await shadow_report_off_thread(o, &error);
    if (out.is_null()) co_return co_await reply(req, client, 500, error_body(error, "server_error"), keep);
    co_return co_await reply(req, client, 200, out.dump(-1, ' ', false, Json::error_handler_t::replace), keep);
  }
  if (path != "/admin/shadow")
    co_return co_await reply(req, client, 404, bad(fmt::format("no admin route {}", path)), keep);
  if (get) co_return co_await reply(req, client, 200, state().dump(), keep);
  if (!post) {
    Headers allow;
    allow.emplace_back("Allow", "GET, HEAD, POST");
    co_return co_await reply(req, client, 405, bad("/admin/shadow takes GET or POST"), keep, "application/json",
                             &allow);
  }
  auto parsed = parse_json(req.body());
  if (const std::string problem = body_problem(parsed); !problem.empty()) {
    co_return co_await reply(req, client, 400, bad(problem), keep);
  }
  auto shadow = parse_shadow(nlohmann::json::parse(parsed->dump()), "shadow", false);
  if (!shadow) co_return co_await reply(req, client, 400, bad(shadow.error().message()), keep);
  if (!shadow->version.empty()) {
    bool found = false, other = false;
    for (const auto& b : pool.stats()) {
      found = found || b.version == shadow->version;
      other = other || b.version != shadow->version;
    }
    if (!found) {
      co_return co_await reply(req, client, 400, bad(fmt::format("no replica has version '{}'", shadow->version)),
                               keep);
    }
    // A rollout that has ended (promoted, aborted) sends every client to one version: shadowed,
    // it answers them still, and no answer of another version is left to copy to it.
    std::string sole;
    {
      MutexLock lock(rollout_mu);
      if (rollout && rollout->phase() == RolloutPhase::kPromoted) sole = rollout->spec().candidate;
      if (rollout && rollout->phase() == RolloutPhase::kAborted) sole = rollout->spec().stable;
    }
    if (sole == shadow->version && shadow->fraction > 0) {
      co_return co_await reply(
          req, client, 400,
          bad(fmt::format("version '{}' answers every client since the rollout ended: no answer of another version "
                          "is left to copy to it; shadow another version",
                          shadow->version)),
          keep);
    }
    if (!other && shadow->fraction > 0) {
      // Its replicas answer no client while it is shadowed: nobody would be left to.
      co_return co_await reply(
          req, client, 400,
          bad(fmt::format("every replica has version '{}': shadowed, none would be left to answer clients",
                          shadow->version)),
          keep);
    }
  }
  if (shadow->noise_fraction > 0) {
    // The noise arm copies a request to a second replica of the version that answered it.
    std::map<std::string, int> replicas;
    for (const auto& b : pool.stats()) {
      if (b.version != shadow->version) ++replicas[b.version];
    }
    if (std::ranges::none_of(replicas, [](const auto& v) { return v.second >= 2; })) {
      co_return co_await reply(
          req, client, 400,
          bad("noiseFraction copies a request to a second replica of the version that answered it, and no version "
              "has two replicas (set it to 0, or add a replica)"),
          keep);
    }
  }
  {
    MutexLock lock(shadow_mu);
    shadow_config = *shadow;
  }
  co_return co_await reply(req, client, 200, state().dump(), keep);
}

}  // namespace sluice::router
