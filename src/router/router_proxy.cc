// Relaying one request to a replica: choosing it (policy.h), retries, one attempt's exchange and
// its relay, what is counted of it (router.h says what and why; router_relay.cc has the pieces
// that hold no routing state).
#include <algorithm>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <fmt/format.h>

#include "router/resolve.h"
#include "router/router_impl.h"

namespace sluice::router {

Exchange Router::Impl::exchange_for(bhttp::request<bhttp::string_body>& req, const Json& body, bool keep) {
  std::string session;
  for (const std::string& h : config.session_headers) {
    const std::string_view v = req[h];
    if (!v.empty()) {
      session = std::string(v);
      break;
    }
  }
  if (session.empty() && body.is_object() && body.contains("user") && body["user"].is_string()) {
    session = body["user"].get<std::string>();
  }
  std::string prompt = prompt_text(body);
  if (req.method() == bhttp::verb::post && body.is_object()) {
    const std::string_view target = req.target();
    if (target.starts_with("/v1/completions") || target.starts_with("/v1/chat/completions")) {
      hot_prefixes.observe(prompt, target.substr(0, target.find('?')), req.body());
    }
  }
  std::string group = usage_group(req[config.usage_group_header], !session.empty());
  Exchange x{req, std::move(session), std::move(prompt), std::move(group), {}, false, keep};
  if (body.is_object() && body.contains("model") && body["model"].is_string()) x.model = body["model"].get<std::string>();
  x.stream = body.is_object() && body.contains("stream") && body["stream"].is_boolean() && body["stream"].get<bool>();
  x.body = req.body();
  x.parsed_body = &body;
  if (x.stream) {
    // The router counts every stream's usage (the replicas' cached tokens): it asks for it, and
    // takes the usage chunk out again when the client had not asked.
    const bool asked = body.contains("stream_options") && body["stream_options"].is_object() &&
                       body["stream_options"].contains("include_usage") &&
                       body["stream_options"]["include_usage"] == true;
    if (!asked && (!body.contains("stream_options") || body["stream_options"].is_object())) {
      Json with = body;
      with["stream_options"]["include_usage"] = true;
      x.body = with.dump(-1, ' ', false, Json::error_handler_t::replace);
      x.strip_usage = true;
    }
  }
  return x;
}

Decision Router::Impl::choose(const Exchange& x, const std::vector<int>& tried, const RouteVersions& versions,
                              const std::string& shadow_only, uint64_t& generation) {
  // The load seen, the choice and its count are one step: two requests deciding at once would
  // both see room under a replica's cap and both take it.
  MutexLock lock(route_mu);
  const std::vector<BackendView> views = pool.snapshot();
  std::vector<int> exclude = tried;
  auto answers_clients = [&](const BackendView& v) {
    return shadow_only.empty() || pool.config(v.index)->version != shadow_only;
  };
  for (const BackendView& v : views) {
    if (!answers_clients(v)) exclude.push_back(v.index);
  }
  // Without a rollout, a request naming a model goes to the replicas that list it (when any of
  // those that answer clients does; else one answers its own 404). A rollout's versions decide
  // for themselves.
  if (!x.model.empty() && versions.assigned.empty()) {
    std::vector<std::optional<bool>> lists(views.size());  // per replica: lists it (unknown: none)
    bool any = false;
    for (size_t i = 0; i < views.size(); ++i) {
      const auto it = served_models.find(views[i].index);
      if (it == served_models.end() || it->second.first != pool.generation(views[i].index)) continue;
      lists[i] = std::ranges::find(it->second.second, x.model) != it->second.second.end();
      any = any || (*lists[i] && views[i].available && answers_clients(views[i]));
    }
    for (size_t i = 0; any && i < views.size(); ++i) {
      if (!lists[i].value_or(true)) exclude.push_back(views[i].index);
    }
  }
  if (!versions.assigned.empty()) {
    // The assigned version's replicas; while it has none to try, the rollout's other version's.
    // Never a version outside the rollout (one being shadowed, another model).
    std::vector<int> others, outside;
    bool arm_has_one = false;
    for (const BackendView& v : views) {
      const std::string& version = pool.config(v.index)->version;
      if (version != versions.assigned) {
        others.push_back(v.index);
        if (version != versions.other) outside.push_back(v.index);
      } else if (v.available && std::find(tried.begin(), tried.end(), v.index) == tried.end()) {
        arm_has_one = true;
      }
    }
    const std::vector<int>& excluded = arm_has_one ? others : outside;
    exclude.insert(exclude.end(), excluded.begin(), excluded.end());
  }
  const Decision d = policy->choose(x.route(), views, exclude);
  if (d.backend >= 0) generation = pool.begin(d.backend);
  return d;
}

void Router::Impl::record_answered(Exchange& x, const Decision& d, const std::string& name, const Attempt& last,
                                   const RouteVersions& versions, bool present, double seconds,
                                   double attempt_seconds, double ttft) {
  const std::string& version = versions.assigned;
  const bool relayed = last.kind == Attempt::kRelayed;
  if (relayed && x.prompt_tokens >= 0) {
    with_metrics([&](Metrics& m) {
      for (Metrics::Usage* u : {present ? &m.usage[name] : nullptr, &m.group_usage[x.group]}) {
        if (!u) continue;
        u->prompt_tokens += x.prompt_tokens;
        u->cached_tokens += x.cached_tokens;
        ++u->with_usage;
        u->prompt_chunks += d.prompt_chunks;
        u->predicted_chunks += d.predicted_chunks;
      }
    });
  }
  if (present) count(name, d.kind, last.kind == Attempt::kClientGone ? 499 : last.status);
  if (relayed) finish_primary(x, last.status, last.body);
  if (!version.empty() && !versions.held) {
    // Counted for the version it was assigned to. Served by another version because that one had
    // no replica available (failing replicas get ejected): an error of its own. A client that
    // gave up before its whole answer reached it is one too (a hung version is seen as such;
    // impatient clients weigh on both versions alike).
    RequestOutcome o;
    o.error = !relayed || last.status >= 500 || x.stream_failed || pool.config(d.backend)->version != version;
    o.refused = !o.error && last.status >= 400 && last.status < 500 && last.status != 429;
    o.ttft = ttft;
    if (ttft >= 0 && x.completion_tokens > 1) {
      o.tpot = (attempt_seconds - ttft) / static_cast<double>(x.completion_tokens - 1);
    }
    if (x.prompt_tokens > 0) o.hit_fraction = static_cast<double>(x.cached_tokens) / static_cast<double>(x.prompt_tokens);
    record_outcome(version, o);
  }
  with_metrics([&](Metrics& m) {
    if (last.kind == Attempt::kClientGone) ++m.client_disconnects;
    if (relayed && present) m.e2e[name].observe(seconds);
    if (ttft >= 0 && present) m.ttft[name].observe(ttft);
  });
}

net::awaitable<bool> Router::Impl::proxy(beast::tcp_stream& client, beast::flat_buffer& buffer,
                                         bhttp::request<bhttp::string_body>& req) {
  const bool keep = req.keep_alive() && !stopping;
  // Routing hints from the body; a body that is not JSON is relayed all the same (the replica
  // answers it) and routed without hints.
  auto parsed = parse_json(req.body());
  const Json body = parsed ? std::move(*parsed) : Json();
  Exchange x = exchange_for(req, body, keep);

  // Counted until the answer is written, whoever writes it (the drain waits for it).
  const CountGuard counted(in_flight);
  // The request's shadow copies learn the primary's answer, or that none reached the client.
  struct ShadowsDone {
    Impl& impl;
    Exchange& x;
    ~ShadowsDone() { impl.finish_primary(x, 0, {}); }
  } shadows_done{*this, x};
  std::vector<int> tried;
  Attempt last;
  bool saw_overload = false;
  std::string retry_after = "1";
  const auto started = Clock::now();
  // A rollout sends the request to one version's replicas (router.h): the others are excluded,
  // unless that version has no replica left to try.
  const RouteVersions versions = route_version(x.session_key);
  const std::string& version = versions.assigned;
  // Without a rollout, a shadow version in force answers no client: its replicas only get copies.
  std::string shadow_only;
  if (version.empty()) {
    MutexLock lock(shadow_mu);
    if (shadow_config.fraction > 0) shadow_only = shadow_config.version;
  }
  for (int a = 0; a < std::max(1, config.max_attempts); ++a) {
    if (a > 0) {
      // The budget bounds retries of answers (429, 5xx: a replica under load, which a retry storm
      // would bury); a replica that died or refused the connection has no load to protect.
      const double budget = std::max(3.0, config.retry_budget * static_cast<double>(in_flight.load()));
      if (last.status != 0 && static_cast<double>(retries_in_flight.load()) >= budget) break;
      retries_in_flight.fetch_add(1);
      with_metrics([](Metrics& m) { ++m.retries; });
      net::steady_timer t(co_await net::this_coro::executor, jitter(a));
      co_await t.async_wait(kTuple);
    }
    uint64_t generation = 0;
    const Decision d = choose(x, tried, versions, shadow_only, generation);
    if (d.backend < 0) {
      if (a > 0) retries_in_flight.fetch_sub(1);
      break;
    }
    tried.push_back(d.backend);
    const std::string name = pool.config(d.backend)->name;
    double ttft = -1;  // from this attempt's start, as is the time per output token
    const auto attempt_started = Clock::now();
    last = co_await attempt(d.backend, client, buffer, x, ttft);
    const double attempt_seconds = std::chrono::duration<double>(Clock::now() - attempt_started).count();
    if (a > 0) retries_in_flight.fetch_sub(1);
    if (last.stale && !x.fresh) {
      // Once per request, on a fresh connection, not counted as an attempt or a failure.
      x.fresh = true;
      tried.pop_back();
      pool.end(d.backend, Outcome::kCancelled);
      --a;
      continue;
    }
    const bool relayed = last.kind == Attempt::kRelayed;
    const bool overload = last.status == 429;
    saw_overload = saw_overload || overload;
    if (overload && !last.retry_after.empty()) retry_after = last.retry_after;
    Outcome outcome = Outcome::kFailure;
    if (relayed) outcome = outcome_of(last.status);
    if (overload) outcome = Outcome::kOverloaded;
    if (last.kind == Attempt::kClientGone) outcome = Outcome::kCancelled;
    // A replica removed meanwhile (admin API, discovery) is not learnt about or counted: its
    // slot may hold another replica by now, and its series are gone.
    const bool present = pool.generation(d.backend) == generation;
    if (!last.released) pool.end(d.backend, outcome);
    {
      // Under route_mu, which a slot's reuse holds too (add_backend): learnt before the reuse
      // (and forgotten by it) or not at all.
      MutexLock lock(route_mu);
      if (pool.generation(d.backend) == generation) policy->routed(x.route(), d.backend, relayed && last.status / 100 == 2);
    }
    if (!last.error_kind.empty() && present) {
      with_metrics([&](Metrics& m) { ++m.upstream_errors[{name, last.error_kind}]; });
    }
    if (relayed || last.kind == Attempt::kClientGone) {
      const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
      record_answered(x, d, name, last, versions, present, seconds, attempt_seconds, ttft);
      co_return relayed && last.keep_alive && keep;
    }
    if (present) count(name, d.kind, last.status ? last.status : (last.error_kind == "timeout" ? 504 : 502));
    if (last.kind == Attempt::kFailed) break;
  }
  // Nothing was relayed: answer from here (a request of a rollout's version that no replica
  // answered is an error of the version it was sent to).
  if (!version.empty() && !versions.held && last.status != 429) record_outcome(version, RequestOutcome{.error = true});
  const bool head_only = req.method() == bhttp::verb::head;  // headers alone, as for any HEAD
  if (last.status != 0 && !(saw_overload && last.status == 429)) {
    Headers extra;
    extra.emplace_back("X-Sluice-Replica", last.replica);  // the last replica tried, whose answer this is
    if (!last.retry_after.empty()) extra.emplace_back("Retry-After", last.retry_after);
    const std::string type = last.content_type.empty() ? "application/json" : last.content_type;
    co_return co_await respond(client, last.status, last.body, keep, type, &extra, head_only);
  }
  if (saw_overload) {
    with_metrics([](Metrics& m) { ++m.no_backend; });
    Headers extra;
    extra.emplace_back("Retry-After", retry_after);
    co_return co_await respond(client, 429, error_body("every replica is saturated; retry later", "rate_limit_error"),
                               keep, "application/json", &extra, head_only);
  }
  if (tried.empty()) {
    with_metrics([](Metrics& m) { ++m.no_backend; });
    co_return co_await respond(client, 503, error_body("no replica is available", "server_error"), keep,
                               "application/json", nullptr, head_only);
  }
  const bool timeout = last.error_kind == "timeout";
  co_return co_await respond(
      client, timeout ? 504 : 502,
      error_body(fmt::format("no replica answered ({} tried; the last: {})", tried.size(), last.error_kind),
                 "server_error"),
      keep, "application/json", nullptr, head_only);
}

net::awaitable<bool> Router::Impl::send(Upstream& u, bhttp::request<bhttp::string_body>& up, Exchange& x,
                                        Attempt& result) {
  const BackendConfig& b = *u.config;
  const auto deadline = u.started + ms(config.upstream_timeout_seconds);
  for (int tries = 0;; ++tries) {
    // A second try: a fresh connection.
    u.conn = tries == 0 && !x.fresh ? take_idle(u.backend, u.generation) : nullptr;
    u.reused = u.conn != nullptr;
    if (!u.conn) {
      u.conn = std::make_unique<beast::tcp_stream>(co_await net::this_coro::executor);
      auto endpoints = co_await resolve(b.url.host, b.url.port, ms(config.connect_timeout_seconds));
      if (!endpoints) {
        result.error_kind = "connect";
        result.kind = Attempt::kRetryable;
        co_return false;
      }
      u.conn->expires_after(ms(config.connect_timeout_seconds));
      auto [cec, endpoint] = co_await u.conn->async_connect(*endpoints, kTuple);
      if (cec) {
        result.error_kind = cec == beast::error::timeout ? "timeout" : "connect";
        result.kind = Attempt::kRetryable;
        co_return false;
      }
      beast::error_code ignored;
      u.conn->socket().set_option(tcp::no_delay(true), ignored);
    }
    u.conn->expires_at(deadline);
    auto [wec, wn] = co_await bhttp::async_write(*u.conn, up, kTuple);
    if (!wec) {
      // Dispatched: the copies for shadow traffic go out now, after the primary.
      if (!x.shadows_started) {
        x.shadows_started = true;
        start_shadows(x, u.backend);
      }
      co_return true;
    }
    if (!(u.reused && tries == 0)) {
      result.error_kind = wec == beast::error::timeout ? "timeout" : "closed";
      result.kind = Attempt::kRetryable;
      co_return false;
    }
  }
}

net::awaitable<Attempt> Router::Impl::attempt(int backend, beast::tcp_stream& client, beast::flat_buffer& buffer,
                                              Exchange& x, double& ttft) {
  Upstream u(backend, pool.generation(backend), pool.config(backend));
  Attempt result;
  bhttp::request<bhttp::string_body> up = upstream_request(*u.config, x);
  if (!co_await send(u, up, x, result)) co_return result;

  // Watch the client while the replica works: a client that closes cancels the exchange.
  const net::any_io_executor ex = co_await net::this_coro::executor;
  ClientWatcher watcher(ex, client, buffer, *u.conn);
  u.parser.body_limit(boost::none);
  if (x.req.method() == bhttp::verb::head) u.parser.skip(true);  // a HEAD answer has no body
  auto [hec, hn] = co_await bhttp::async_read_header(*u.conn, u.buf, u.parser, kTuple);
  if (hec) {
    co_await watcher.stop();
    if (watcher.client_gone()) {
      result.kind = Attempt::kClientGone;
      co_return result;
    }
    result.error_kind = read_error_kind(hec);
    // A replica that took the request and did not answer within --upstream-timeout: another would
    // be given the same work (a long generation computed on every replica, the client waiting
    // the timeout for each).
    result.kind = result.error_kind == "timeout" ? Attempt::kFailed : Attempt::kRetryable;
    // An idle connection the replica closed in the meantime (servers close idle keep-alive
    // connections): the write went through, the answer never comes. Not the replica's failure;
    // its other idle connections are likely as old.
    result.stale = u.reused && u.buf.size() == 0 && result.error_kind == "closed";
    if (result.stale) {
      MutexLock lock(idle_mu);
      idle[backend].clear();
    }
    co_return result;
  }
  result.status = static_cast<int>(u.parser.get().result_int());
  result.content_type = std::string(u.parser.get()[bhttp::field::content_type]);
  result.retry_after = std::string(u.parser.get()[bhttp::field::retry_after]);
  result.allow = std::string(u.parser.get()[bhttp::field::allow]);
  const auto [first, last] = u.parser.get().equal_range(bhttp::field::www_authenticate);
  for (auto it = first; it != last; ++it) result.www_authenticate.emplace_back(it->value());
  result.replica = u.config->name;
  if (result.status / 100 == 2 && x.stream) {
    co_return co_await relay_stream(u, client, watcher, x, std::move(result), ttft);
  }
  co_return co_await relay_whole(u, client, watcher, x, std::move(result));
}

net::awaitable<Attempt> Router::Impl::relay_stream(Upstream& u, beast::tcp_stream& client, ClientWatcher& watcher,
                                                   Exchange& x, Attempt result, double& ttft) {
  const auto write_limit = ms(config.idle_timeout_seconds);
  // An HTTP/1.0 client knows no chunked encoding: its stream ends when the connection closes.
  const bool chunked = x.req.version() >= 11;
  auto frame = [chunked](std::string_view bytes) {
    return chunked ? fmt::format("{:x}\r\n{}\r\n", bytes.size(), bytes) : std::string(bytes);
  };
  const std::string head = fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nCache-Control: no-cache\r\n{}{}"
      "X-Sluice-Replica: {}\r\n\r\n",
      result.status, reason(result.status), result.content_type.empty() ? "text/event-stream" : result.content_type,
      chunked ? "Transfer-Encoding: chunked\r\n" : "",
      x.keep_alive && chunked ? "Connection: keep-alive\r\n" : "Connection: close\r\n", u.config->name);
  bool client_write_failed = static_cast<bool>(co_await write_client(client, head, write_limit));
  StreamRelay relay(x);
  std::array<char, 16384> piece;
  bool failed = false;
  while (!u.parser.is_done() && !client_write_failed) {
    u.parser.get().body().data = piece.data();
    u.parser.get().body().size = piece.size();
    auto [ec, n] = co_await bhttp::async_read_some(*u.conn, u.buf, u.parser, kTuple);
    if (ec == bhttp::error::need_buffer) ec = {};
    const size_t got = piece.size() - u.parser.get().body().size;
    if (got > 0) {
      if (ttft < 0) ttft = std::chrono::duration<double>(Clock::now() - u.started).count();
      const std::string out = relay.take(std::string_view(piece.data(), got));
      if (!out.empty()) {
        const std::string chunk = frame(out);
        client_write_failed = static_cast<bool>(co_await write_client(client, chunk, write_limit));
      }
    }
    if (ec) {
      failed = true;
      result.error_kind = read_error_kind(ec);
      break;
    }
  }
  co_await watcher.stop();
  if (watcher.client_gone() || client_write_failed) {
    result.kind = Attempt::kClientGone;
    co_return result;  // the upstream connection closes with `u.conn`
  }
  std::string tail;
  if (std::string rest = relay.finish(); !rest.empty()) tail = frame(rest);
  if (failed) {
    // The stream started: end it with an error event rather than retry or hang.
    with_metrics([](Metrics& m) { ++m.stream_errors; });
    x.stream_failed = true;
    tail += frame(relay.error_event(result.error_kind));
  }
  if (chunked) tail += "0\r\n\r\n";
  // The replica's share is done before the client sees the end, so the client's next request
  // finds the load as it is (a session would spill from its own replica otherwise).
  pool.end(u.backend, failed ? Outcome::kFailure : Outcome::kSuccess);
  result.released = true;
  const beast::error_code ec = co_await write_client(client, tail, write_limit);
  result.kind = ec ? Attempt::kClientGone : Attempt::kRelayed;
  result.keep_alive = !failed && chunked;
  if (!failed && u.parser.keep_alive()) give_idle(u.backend, u.generation, std::move(u.conn));
  co_return result;
}

net::awaitable<Attempt> Router::Impl::relay_whole(Upstream& u, beast::tcp_stream& client, ClientWatcher& watcher,
                                                  Exchange& x, Attempt result) {
  std::array<char, 16384> piece;
  std::string collected;
  bool failed = false;
  while (!u.parser.is_done()) {
    u.parser.get().body().data = piece.data();
    u.parser.get().body().size = piece.size();
    auto [ec, n] = co_await bhttp::async_read_some(*u.conn, u.buf, u.parser, kTuple);
    if (ec == bhttp::error::need_buffer) ec = {};
    const size_t got = piece.size() - u.parser.get().body().size;
    if (collected.size() + got > (64u << 20)) {
      failed = true;
      result.error_kind = "protocol";
      break;
    }
    collected.append(piece.data(), got);
    if (ec) {
      failed = true;
      result.error_kind = read_error_kind(ec);
      break;
    }
  }
  co_await watcher.stop();
  if (watcher.client_gone()) {
    result.kind = Attempt::kClientGone;
    co_return result;  // the upstream connection closes with `u.conn`
  }
  if (failed) {
    result.status = 0;
    result.kind = result.error_kind == "timeout" ? Attempt::kFailed : Attempt::kRetryable;  // (as above)
    co_return result;
  }
  if (u.parser.keep_alive()) give_idle(u.backend, u.generation, std::move(u.conn));
  result.body = std::move(collected);
  if (result.status / 100 == 2) {
    if (auto j = parse_json(result.body)) read_usage(*j, x.prompt_tokens, x.cached_tokens, &x.completion_tokens);
  }
  const double retry_after = result.retry_after.empty() ? 0 : retry_after_seconds(result.retry_after);
  const bool retryable = result.status == 502 || result.status == 503 || result.status == 504 ||
                         (result.status == 429 && retry_after <= config.max_retry_after_seconds);
  if (retryable) {
    result.kind = Attempt::kRetryable;
    co_return result;
  }
  Headers extra;
  extra.emplace_back("X-Sluice-Replica", u.config->name);
  if (!result.retry_after.empty()) extra.emplace_back("Retry-After", result.retry_after);
  if (!result.allow.empty()) extra.emplace_back("Allow", result.allow);
  for (const std::string& challenge : result.www_authenticate) extra.emplace_back("WWW-Authenticate", challenge);
  const std::string type = result.content_type.empty() ? "application/json" : result.content_type;
  pool.end(u.backend, outcome_of(result.status));  // before the client sees the answer (as above)
  result.released = true;
  const bool keep = co_await respond(client, result.status, result.body, x.keep_alive, type, &extra);
  result.kind = Attempt::kRelayed;
  result.keep_alive = keep;
  co_return result;
}

}  // namespace sluice::router
