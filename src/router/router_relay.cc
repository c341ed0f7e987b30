// The pieces of relaying an exchange that hold no routing state: what a prompt starts with, the
// usage of an answer, the request as a replica gets it, the client watcher, writes to the client
// and a stream's relay event by event (router_proxy.cc puts them together).
#include <algorithm>
#include <cmath>
#include <ctime>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <fmt/format.h>

#include "router/router_impl.h"
#include "common/sse.h"

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

double retry_after_seconds(std::string_view value) {
  const std::string v(value);
  if (!v.empty() && v.find_first_not_of("0123456789") == std::string::npos) return std::atof(v.c_str());
  std::tm tm{};
  // IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT"), the form senders must use.
  const char* end = ::strptime(v.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  if (!end || *end != '\0') return INFINITY;
  const double at = static_cast<double>(::timegm(&tm));
  return std::max(0.0, at - epoch_now());
}

std::string read_error_kind(const beast::error_code& ec) {
  if (ec == beast::error::timeout) return "timeout";
  if (ec.category() == bhttp::make_error_code(bhttp::error::bad_version).category() &&
      ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message) {
    return "protocol";
  }
  return "closed";
}

bhttp::request<bhttp::string_body> upstream_request(const BackendConfig& b, const Exchange& x) {
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
  return up;
}

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

ClientWatcher::ClientWatcher(const net::any_io_executor& ex, beast::tcp_stream& client, beast::flat_buffer& buffer,
                             beast::tcp_stream& upstream)
    : client_(client), buffer_(buffer), upstream_(upstream), done_(ex, Clock::time_point::max()) {
  net::co_spawn(
      ex,
      [this]() -> net::awaitable<void> {
        while (watching_ && buffer_.size() < (64u << 10)) {
          auto [ec, n] = co_await client_.async_read_some(buffer_.prepare(4096), kTuple);
          buffer_.commit(n);  // bytes of a next request, kept for it
          if (ec == net::error::operation_aborted || !watching_) break;
          if (ec) {
            gone_ = true;
            beast::error_code ignored;
            upstream_.socket().close(ignored);
            break;
          }
        }
        running_ = false;
        done_.cancel();
        co_return;
      },
      net::detached);
}

net::awaitable<void> ClientWatcher::stop() {
  watching_ = false;
  beast::error_code ignored;
  client_.socket().cancel(ignored);
  if (running_) co_await done_.async_wait(kTuple);
}

namespace {

// A stream chunk's usage field before the usage chunk (OpenAI's form), as replicas write it.
constexpr std::string_view kNullUsage[] = {",\"usage\":null", ", \"usage\": null", ",\"usage\": null"};

}  // namespace

std::string StreamRelay::take(std::string_view piece) {
  events_.append(piece);
  std::string out = relay(false);
  if (events_.size() > (1u << 20)) {  // not SSE: relayed as it is
    out += events_;
    events_.clear();
  }
  capture(out);
  return out;
}

std::string StreamRelay::finish() {
  std::string out = relay(true);
  out += std::exchange(events_, {});  // an unfinished last event, as it came
  capture(out);
  return out;
}

void StreamRelay::capture(const std::string& out) {
  if (!x_.capture || x_.capture_overflow) return;
  x_.capture_overflow = x_.captured.size() + out.size() > kMaxCapturedStream;
  if (!x_.capture_overflow) x_.captured += out;
}

std::string StreamRelay::relay(bool final) {
  std::string out;
  size_t at = 0;
  for (size_t end; (end = http::sse_event_end(events_, at, final)) != std::string::npos; at = end) {
    const std::string_view event(events_.data() + at, end - at);
    if (head_.is_null() && event.starts_with("data: {")) {
      // The response's id, model and created, for an error event that ends it (error_event).
      if (auto j = parse_json(event.substr(6)); j && j->is_object()) {
        head_ = Json::object();
        for (const char* k : {"id", "created", "model", "system_fingerprint"}) {
          if (j->contains(k)) head_[k] = (*j)[k];
        }
      }
    }
    if (event.starts_with("data: {") && event.find("\"usage\"") != std::string_view::npos) {
      auto j = parse_json(event.substr(6));
      int64_t prompt = 0, cached = 0;
      if (j && read_usage(*j, prompt, cached, &x_.completion_tokens)) {
        x_.prompt_tokens = prompt, x_.cached_tokens = cached;
        const bool usage_only = j->contains("choices") && (*j)["choices"].is_array() && (*j)["choices"].empty();
        if (x_.strip_usage && usage_only) continue;
      }
    }
    if (x_.strip_usage && event.find("\"usage\"") != std::string_view::npos) {
      // Asked for by the router only: every chunk's "usage": null goes too, as the replica would
      // have sent it to this client (compact or with a space; inside a string the quotes would
      // be escaped).
      std::string e(event);
      for (const std::string_view null_usage : kNullUsage) {
        for (size_t p; (p = e.find(null_usage)) != std::string::npos;) e.erase(p, null_usage.size());
      }
      out += e;
      continue;
    }
    out.append(event);
  }
  events_.erase(0, at);
  return out;
}

std::string StreamRelay::error_event(std::string_view error_kind) const {
  const bool chat = x_.req.target().find("chat") != std::string_view::npos;
  Json choice = {{"index", 0}, {"finish_reason", "error"}};
  choice[chat ? "delta" : "text"] = chat ? Json::object() : Json("");
  // As the chunks before it: the same id, created and model (where one was relayed).
  Json chunk = head_.is_object() ? head_ : Json::object();
  chunk["object"] = chat ? "chat.completion.chunk" : "text_completion";
  chunk["choices"] = Json::array({choice});
  chunk["error"] = {{"message", fmt::format("the replica failed mid-stream ({})", error_kind)}, {"type", "server_error"}};
  return "data: " + chunk.dump() + "\n\ndata: [DONE]\n\n";
}

}  // namespace sluice::router
