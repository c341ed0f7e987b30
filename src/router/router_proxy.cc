// Relaying one request to a replica: choosing it (policy.h), retries, the exchange, a stream's
// relay event by event, the client watcher, usage (router.h says what and why).
#include <algorithm>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <fmt/format.h>

#include "router/resolve.h"
#include "router/router_impl.h"

namespace sluice::router {

std::string prompt_text(const Json& body) {
  std::string text;
  if (!body.is_object()) return text;
  if (auto p = body.find("prompt"); p != body.end()) {
    if (p->is_string()) text = p->get<std::string>();
    if (p->is_array()) {
      for (const Json& s : *p) {
        if (s.is_string()) text += s.get<std::string>();
      }
    }
  }
  if (auto m = body.find("messages"); m != body.end() && m->is_array()) {
    for (const Json& msg : *m) {
      if (!msg.is_object()) continue;
      if (auto r = msg.find("role"); r != msg.end() && r->is_string()) text += r->get<std::string>() + "\n";
      if (auto c = msg.find("content"); c != msg.end()) {
        if (c->is_string()) text += c->get<std::string>();
        if (c->is_array()) {
          for (const Json& part : *c) {
            if (part.is_object() && part.contains("text") && part["text"].is_string()) text += part["text"].get<std::string>();
          }
        }
      }
      text += "\n";
    }
  }
  return text;
}

// A stream chunk's usage field before the usage chunk (OpenAI's form), as replicas write it.
constexpr std::string_view kNullUsage[] = {",\"usage\":null", ", \"usage\": null", ",\"usage\": null"};

bool read_usage(const Json& j, int64_t& prompt, int64_t& cached, int64_t* completion) {
  if (!j.is_object() || !j.contains("usage") || !j["usage"].is_object()) return false;
  const Json& u = j["usage"];
  if (!u.contains("prompt_tokens") || !u["prompt_tokens"].is_number_integer()) return false;
  prompt = u["prompt_tokens"].get<int64_t>();
  if (completion && u.contains("completion_tokens") && u["completion_tokens"].is_number_integer()) {
    *completion = u["completion_tokens"].get<int64_t>();
  }
  cached = 0;
  if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object() &&
      u["prompt_tokens_details"].contains("cached_tokens") &&
      u["prompt_tokens_details"]["cached_tokens"].is_number_integer()) {
    cached = u["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
  }
  return true;
}

namespace {

// What went wrong reading a replica's answer: "timeout"; "protocol" where the bytes that came are
// not HTTP (a malformed status line, header or Content-Length, a bad chunk); else "closed".
std::string read_error_kind(const beast::error_code& ec) {
  if (ec == beast::error::timeout) return "timeout";
  if (ec.category() == bhttp::make_error_code(bhttp::error::bad_version).category() &&
      ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message) {
    return "protocol";
  }
  return "closed";
}

// A write to the client that takes longer than `limit` (a client that stopped reading, its
// socket buffer full) closes its connection, which fails the write: the request is then cancelled
// upstream. (The connection's stream has no write timeout of its own here: it would also end the
// watcher's read, which waits as long as the answer takes.)
net::awaitable<beast::error_code> write_client(beast::tcp_stream& client, std::string_view bytes,
                                               std::chrono::milliseconds limit) {
  auto done = std::make_shared<bool>(false);
  net::steady_timer guard(co_await net::this_coro::executor, limit);
  guard.async_wait([done, &client](const beast::error_code& ec) {
    if (ec || *done) return;  // the write finished first: `client` may be gone by now, untouched
    beast::error_code ignored;
    client.socket().close(ignored);
  });
  auto [ec, n] = co_await net::async_write(client, net::buffer(bytes), kTuple);
  *done = true;
  guard.cancel();
  co_return ec;
}

}  // namespace

net::awaitable<bool> Router::Impl::proxy(beast::tcp_stream& client, beast::flat_buffer& buffer,
                                         bhttp::request<bhttp::string_body>& req) {
  const bool keep = req.keep_alive() && !stopping;
  // Routing hints from the body; a body that is not JSON is relayed all the same (the replica
  // answers it) and routed without hints.
  auto parsed = parse_json(req.body());
  const Json body = parsed ? std::move(*parsed) : Json();
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
  const std::string prompt = prompt_text(body);
  if (req.method() == bhttp::verb::post && body.is_object()) {
    const std::string_view target = req.target();
    if (target.starts_with("/v1/completions") || target.starts_with("/v1/chat/completions")) {
      hot_prefixes.observe(prompt, target.substr(0, target.find('?')), req.body());
    }
  }
  Exchange x{req, RouteRequest{session, prompt}, usage_group(req[config.usage_group_header], !session.empty()), false,
             keep};
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
  const std::string version = route_version(x.route.session_key);
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
    // The load seen, the choice and its count are one step: two requests deciding at once would
    // both see room under a replica's cap and both take it.
    Decision d;
    uint64_t generation = 0;
    {
      MutexLock lock(route_mu);
      const std::vector<BackendView> views = pool.snapshot();
      std::vector<int> exclude = tried;
      if (!shadow_only.empty()) {
        for (const BackendView& v : views) {
          if (pool.config(v.index)->version == shadow_only) exclude.push_back(v.index);
        }
      }
      if (!version.empty()) {
        std::vector<int> others;
        bool arm_has_one = false;
        for (const BackendView& v : views) {
          if (pool.config(v.index)->version != version) {
            others.push_back(v.index);
          } else if (v.available && std::find(tried.begin(), tried.end(), v.index) == tried.end()) {
            arm_has_one = true;
          }
        }
        if (arm_has_one) exclude.insert(exclude.end(), others.begin(), others.end());
      }
      d = policy->choose(x.route, views, exclude);
      if (d.backend >= 0) generation = pool.begin(d.backend);
    }
    if (d.backend < 0) {
      if (a > 0) retries_in_flight.fetch_sub(1);
      break;
    }
    tried.push_back(d.backend);
    const std::string name = pool.config(d.backend)->name;
    double ttft = -1;  // from this attempt's start, as is the time per output token below
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
      if (pool.generation(d.backend) == generation) policy->routed(x.route, d.backend, relayed && last.status / 100 == 2);
    }
    if (!last.error_kind.empty() && present) {
      with_metrics([&](Metrics& m) { ++m.upstream_errors[{name, last.error_kind}]; });
    }
    if (relayed || last.kind == Attempt::kClientGone) {
      const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
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
      if (!version.empty()) {
        // Counted for the version it was assigned to. Served by another version because that
        // one had no replica available (failing replicas get ejected): an error of its own. A
        // client that gave up before its whole answer reached it is one too (a hung version is
        // seen as such; impatient clients weigh on both versions alike).
        RequestOutcome o;
        o.error = !relayed || last.status >= 500 || x.stream_failed || pool.config(d.backend)->version != version;
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
      co_return relayed && last.keep_alive && keep;
    }
    if (present) count(name, d.kind, last.status ? last.status : (last.error_kind == "timeout" ? 504 : 502));
    if (last.kind == Attempt::kFailed) break;
  }
  // Nothing was relayed: answer from here (a request of a rollout's version that no replica
  // answered is an error of the version it was sent to).
  if (!version.empty() && last.status != 429) record_outcome(version, RequestOutcome{.error = true});
  if (last.status != 0 && !(saw_overload && last.status == 429)) {
    Headers extra;
    if (!last.retry_after.empty()) extra.emplace_back("Retry-After", last.retry_after);
    const std::string type = last.content_type.empty() ? "application/json" : last.content_type;
    co_return co_await respond(client, last.status, last.body, keep, type, &extra);
  }
  if (saw_overload) {
    with_metrics([](Metrics& m) { ++m.no_backend; });
    Headers extra;
    extra.emplace_back("Retry-After", retry_after);
    co_return co_await respond(client, 429, error_body("every replica is saturated; retry later", "rate_limit_error"),
                               keep, "application/json", &extra);
  }
  if (tried.empty()) {
    with_metrics([](Metrics& m) { ++m.no_backend; });
    co_return co_await respond(client, 503, error_body("no replica is available", "server_error"), keep);
  }
  const bool timeout = last.error_kind == "timeout";
  co_return co_await respond(
      client, timeout ? 504 : 502,
      error_body(fmt::format("no replica answered ({} tried; the last: {})", tried.size(), last.error_kind),
                 "server_error"),
      keep);
}

net::awaitable<Attempt> Router::Impl::attempt(int backend, beast::tcp_stream& client, beast::flat_buffer& buffer,
                                              Exchange& x, double& ttft) {
  // The replica as it was when chosen: the admin API or discovery may remove it meanwhile.
  const std::shared_ptr<const BackendConfig> config_of = pool.config(backend);
  const BackendConfig& b = *config_of;
  const uint64_t generation = pool.generation(backend);
  const auto started = Clock::now();
  auto ex = co_await net::this_coro::executor;
  Attempt result;

  // The request as the replica gets it.
  bhttp::request<bhttp::string_body> up(x.req.method(), b.url.path + std::string(x.req.target()), 11);
  up.set(bhttp::field::host, b.url.authority());
  for (const auto& f : x.req) {
    const std::string_view name = f.name_string();
    // Hop-by-hop headers stay here (RFC 9110 7.6.1), and so does Accept-Encoding: the router
    // relays bodies as they come and does not pass Content-Encoding back.
    static constexpr std::string_view kDropped[] = {"host", "connection", "content-length", "transfer-encoding",
                                                    "keep-alive", "expect", "te", "trailer", "upgrade",
                                                    "proxy-authorization", "proxy-connection", "accept-encoding"};
    if (std::any_of(std::begin(kDropped), std::end(kDropped), [&](std::string_view d) { return http::iequals(name, d); }) ||
        (http::iequals(name, "authorization") && !b.api_key.empty())) {
      continue;
    }
    up.insert(name, f.value());
  }
  if (!b.api_key.empty()) up.set(bhttp::field::authorization, "Bearer " + b.api_key);
  up.body() = x.body;
  up.keep_alive(true);
  up.prepare_payload();

  std::unique_ptr<beast::tcp_stream> conn;
  bhttp::response_parser<bhttp::buffer_body> parser;
  beast::flat_buffer ubuf;
  const auto deadline = started + ms(config.upstream_timeout_seconds);
  bool reused = false;
  for (int tries = 0;; ++tries) {
    conn = tries == 0 && !x.fresh ? take_idle(backend, generation) : nullptr;  // a second try: a fresh connection
    reused = conn != nullptr;
    if (!conn) {
      conn = std::make_unique<beast::tcp_stream>(ex);
      auto endpoints = co_await resolve(b.url.host, b.url.port, ms(config.connect_timeout_seconds));
      if (!endpoints) {
        result.error_kind = "connect";
        result.kind = Attempt::kRetryable;
        co_return result;
      }
      conn->expires_after(ms(config.connect_timeout_seconds));
      auto [cec, endpoint] = co_await conn->async_connect(*endpoints, kTuple);
      if (cec) {
        result.error_kind = cec == beast::error::timeout ? "timeout" : "connect";
        result.kind = Attempt::kRetryable;
        co_return result;
      }
      beast::error_code ignored;
      conn->socket().set_option(tcp::no_delay(true), ignored);
    }
    conn->expires_at(deadline);
    auto [wec, wn] = co_await bhttp::async_write(*conn, up, kTuple);
    if (!wec) {
      // Dispatched: the copies for shadow traffic go out now, after the primary.
      if (!x.shadows_started) {
        x.shadows_started = true;
        start_shadows(x, backend);
      }
      // Watch the client while the replica works: a client that closes cancels the exchange.
      break;
    }
    if (!(reused && tries == 0)) {
      result.error_kind = wec == beast::error::timeout ? "timeout" : "closed";
      result.kind = Attempt::kRetryable;
      co_return result;
    }
  }

  // The client watcher: reads from the client while the exchange runs (bytes of a next request
  // go into its buffer); an end of stream or error closes the upstream connection.
  bool client_gone = false, watching = true, watcher_running = true;
  net::steady_timer watcher_done(ex, Clock::time_point::max());
  beast::tcp_stream* upstream = conn.get();
  net::co_spawn(
      ex,
      [&]() -> net::awaitable<void> {
        while (watching && buffer.size() < (64u << 10)) {
          auto [ec, n] = co_await client.async_read_some(buffer.prepare(4096), kTuple);
          buffer.commit(n);  // bytes of a next request, kept for it
          if (ec == net::error::operation_aborted || !watching) break;
          if (ec) {
            client_gone = true;
            beast::error_code ignored;
            upstream->socket().close(ignored);
            break;
          }
        }
        watcher_running = false;
        watcher_done.cancel();
        co_return;
      },
      net::detached);
  auto stop_watching = [&]() -> net::awaitable<void> {
    watching = false;
    beast::error_code ignored;
    client.socket().cancel(ignored);
    if (watcher_running) co_await watcher_done.async_wait(kTuple);
  };

  parser.body_limit(boost::none);
  if (x.req.method() == bhttp::verb::head) parser.skip(true);  // a HEAD answer has no body
  auto [hec, hn] = co_await bhttp::async_read_header(*conn, ubuf, parser, kTuple);
  if (hec) {
    co_await stop_watching();
    if (client_gone) {
      result.kind = Attempt::kClientGone;
      co_return result;
    }
    result.error_kind = read_error_kind(hec);
    result.kind = Attempt::kRetryable;
    // An idle connection the replica closed in the meantime (servers close idle keep-alive
    // connections): the write went through, the answer never comes. Not the replica's failure;
    // its other idle connections are likely as old.
    result.stale = reused && ubuf.size() == 0 && result.error_kind == "closed";
    if (result.stale) {
      MutexLock lock(idle_mu);
      idle[backend].clear();
    }
    co_return result;
  }
  result.status = static_cast<int>(parser.get().result_int());
  result.content_type = std::string(parser.get()[bhttp::field::content_type]);
  result.retry_after = std::string(parser.get()[bhttp::field::retry_after]);
  const bool ok = result.status / 100 == 2;
  const bool relay_stream = ok && x.stream;
  std::array<char, 16384> piece;
  std::string collected;
  std::string events;  // a stream's bytes not yet relayed: at most one incomplete event
  Json stream_head;     // the first chunk's id, created, model, system_fingerprint
  bool failed = false;
  bool client_write_failed = false;
  // An HTTP/1.0 client knows no chunked encoding: its stream ends when the connection closes.
  const bool chunked = x.req.version() >= 11;
  auto frame = [chunked](std::string_view bytes) {
    return chunked ? fmt::format("{:x}\r\n{}\r\n", bytes.size(), bytes) : std::string(bytes);
  };
  if (relay_stream) {
    std::string h = fmt::format(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nCache-Control: no-cache\r\n{}{}"
        "X-Sluice-Replica: {}\r\n\r\n",
        result.status, reason(result.status), result.content_type.empty() ? "text/event-stream" : result.content_type,
        chunked ? "Transfer-Encoding: chunked\r\n" : "",
        x.keep_alive && chunked ? "Connection: keep-alive\r\n" : "Connection: close\r\n", b.name);
    client_write_failed = static_cast<bool>(co_await write_client(client, h, ms(config.idle_timeout_seconds)));
  }
  while (!parser.is_done() && !client_write_failed) {
    parser.get().body().data = piece.data();
    parser.get().body().size = piece.size();
    auto [ec, n] = co_await bhttp::async_read_some(*conn, ubuf, parser, kTuple);
    if (ec == bhttp::error::need_buffer) ec = {};
    const size_t got = piece.size() - parser.get().body().size;
    if (got > 0) {
      if (relay_stream) {
        if (ttft < 0) ttft = std::chrono::duration<double>(Clock::now() - started).count();
        // Whole events are relayed as they complete; a usage chunk is read (and dropped if the
        // router asked for it).
        events.append(piece.data(), got);
        std::string out;
        size_t at = 0;
        for (size_t end; (end = events.find("\n\n", at)) != std::string::npos; at = end + 2) {
          const std::string_view event(events.data() + at, end + 2 - at);
          if (stream_head.is_null() && event.starts_with("data: {")) {
            // The response's id, model and created, for an error event that ends it (below).
            if (auto j = parse_json(event.substr(6)); j && j->is_object()) {
              stream_head = Json::object();
              for (const char* k : {"id", "created", "model", "system_fingerprint"}) {
                if (j->contains(k)) stream_head[k] = (*j)[k];
              }
            }
          }
          if (event.starts_with("data: {") && event.find("\"usage\"") != std::string_view::npos) {
            auto j = parse_json(event.substr(6));
            int64_t prompt = 0, cached = 0;
            if (j && read_usage(*j, prompt, cached, &x.completion_tokens)) {
              x.prompt_tokens = prompt, x.cached_tokens = cached;
              const bool usage_only = j->contains("choices") && (*j)["choices"].is_array() && (*j)["choices"].empty();
              if (x.strip_usage && usage_only) continue;
            }
          }
          if (x.strip_usage && event.find("\"usage\"") != std::string_view::npos) {
            // Asked for by the router only: every chunk's "usage": null goes too, as the replica
            // would have sent it to this client (compact or with a space; inside a string the
            // quotes would be escaped).
            std::string e(event);
            for (const std::string_view null_usage : kNullUsage) {
              for (size_t p; (p = e.find(null_usage)) != std::string::npos;) e.erase(p, null_usage.size());
            }
            out += e;
            continue;
          }
          out.append(event);
        }
        events.erase(0, at);
        if (events.size() > (1u << 20)) out += std::exchange(events, {});  // not SSE: relayed as it is
        if (x.capture && !x.capture_overflow) {
          x.capture_overflow = x.captured.size() + out.size() > kMaxCapturedStream;
          if (!x.capture_overflow) x.captured += out;
        }
        if (!out.empty()) {
          const std::string chunk = frame(out);
          client_write_failed = static_cast<bool>(co_await write_client(client, chunk, ms(config.idle_timeout_seconds)));
        }
      } else if (collected.size() + got > (64u << 20)) {
        failed = true;
        result.error_kind = "protocol";
        break;
      } else {
        collected.append(piece.data(), got);
      }
    }
    if (ec) {
      failed = true;
      result.error_kind = read_error_kind(ec);
      break;
    }
  }
  co_await stop_watching();
  if (client_gone || client_write_failed) {
    result.kind = Attempt::kClientGone;
    co_return result;  // the upstream connection closes with `conn`
  }
  if (relay_stream) {
    std::string tail;
    if (!events.empty()) tail = frame(events);  // an unfinished last event
    if (failed) {
      // The stream started: end it with an error event rather than retry or hang.
      with_metrics([](Metrics& m) { ++m.stream_errors; });
      x.stream_failed = true;
      const bool chat = x.req.target().find("chat") != std::string_view::npos;
      Json choice = {{"index", 0}, {"finish_reason", "error"}};
      choice[chat ? "delta" : "text"] = chat ? Json::object() : Json("");
      // As the chunks before it: the same id, created and model (where one was relayed).
      Json chunk = stream_head.is_object() ? stream_head : Json::object();
      chunk["object"] = chat ? "chat.completion.chunk" : "text_completion";
      chunk["choices"] = Json::array({choice});
      chunk["error"] = {{"message", fmt::format("the replica failed mid-stream ({})", result.error_kind)},
                        {"type", "server_error"}};
      const std::string event = "data: " + chunk.dump() + "\n\ndata: [DONE]\n\n";
      tail += frame(event);
    }
    if (chunked) tail += "0\r\n\r\n";
    // The replica's share is done before the client sees the end, so the client's next request
    // finds the load as it is (a session would spill from its own replica otherwise).
    pool.end(backend, failed ? Outcome::kFailure : Outcome::kSuccess);
    result.released = true;
    const beast::error_code ec = co_await write_client(client, tail, ms(config.idle_timeout_seconds));
    result.kind = ec ? Attempt::kClientGone : Attempt::kRelayed;
    result.keep_alive = !failed && chunked;
    if (!failed && parser.keep_alive()) give_idle(backend, generation, std::move(conn));
    co_return result;
  }
  if (failed) {
    result.status = 0;
    result.kind = Attempt::kRetryable;
    co_return result;
  }
  if (parser.keep_alive()) give_idle(backend, generation, std::move(conn));
  result.body = std::move(collected);
  if (ok) {
    if (auto j = parse_json(result.body)) read_usage(*j, x.prompt_tokens, x.cached_tokens, &x.completion_tokens);
  }
  double retry_after = 0;
  if (!result.retry_after.empty()) retry_after = std::atof(result.retry_after.c_str());
  const bool retryable = result.status == 502 || result.status == 503 || result.status == 504 ||
                         (result.status == 429 && retry_after <= config.max_retry_after_seconds);
  if (retryable) {
    result.kind = Attempt::kRetryable;
    co_return result;
  }
  Headers extra;
  extra.emplace_back("X-Sluice-Replica", b.name);
  if (!result.retry_after.empty()) extra.emplace_back("Retry-After", result.retry_after);
  const std::string type = result.content_type.empty() ? "application/json" : result.content_type;
  pool.end(backend, outcome_of(result.status));  // before the client sees the answer (as above)
  result.released = true;
  const bool keep = co_await respond(client, result.status, result.body, x.keep_alive, type, &extra);
  result.kind = Attempt::kRelayed;
  result.keep_alive = keep;
  co_return result;
}
}  // namespace sluice::router
