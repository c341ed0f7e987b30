#include "server/http_server.h"

#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <deque>
#include <iostream>
#include <future>
#include <optional>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include "common/mutex.h"

namespace sluice::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {
class Session;
constexpr auto kWriteTimeout = std::chrono::seconds(60);
constexpr size_t kHeaderLimit = 64 << 10;
constexpr size_t kReadChunk = 64 << 10;
}  // namespace

struct HttpServer::Impl {
  Impl(OpenAiApi& a, ServerConfig c) : api(a), config(std::move(c)) {}

  OpenAiApi& api;
  const ServerConfig config;
  net::io_context ioc;
  // The acceptor and the signal set are touched only on this strand (accepting, and closing
  // them at the end of a drain, run on different I/O threads otherwise).
  net::strand<net::io_context::executor_type> control{net::make_strand(ioc)};
  tcp::acceptor acceptor{control};
  net::signal_set signals{control, SIGINT, SIGTERM};
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;

  // Request work (JSON, chat template, tokenizer) runs here, never on the I/O threads.
  net::thread_pool workers{static_cast<size_t>(std::max(1, config.threads))};

  std::atomic<bool> draining{false};
  std::atomic<bool> drain_now{false};   // a second signal: stop waiting for in-flight requests
  std::atomic<int64_t> in_flight{0};
  std::atomic<int64_t> buffered_bytes{0};

  Mutex mu;
  CondVar cv;
  bool shutdown_requested SLUICE_GUARDED_BY(mu) = false;
  std::vector<std::weak_ptr<Session>> sessions SLUICE_GUARDED_BY(mu);  // pruned as they close
  HttpMetrics metrics SLUICE_GUARDED_BY(mu);

  void count_response(const std::string& route, int status) {
    MutexLock lock(mu);
    ++metrics.responses[{route, status}];
  }
  void count_disconnect() {
    MutexLock lock(mu);
    ++metrics.client_disconnects;
  }
  void count_slow_client() {
    MutexLock lock(mu);
    ++metrics.slow_client_cancels;
  }
  void count_timeout() {
    MutexLock lock(mu);
    ++metrics.request_timeouts;
  }
  bool origin_allowed(std::string_view origin) const {
    if (origin.empty()) return false;
    for (const std::string& o : config.allowed_origins) {
      if (o == "*" || o == origin) return true;
    }
    return false;
  }
  void accept();
};

namespace {

// The routes this server knows, for dispatch and as metric labels.
constexpr std::string_view kRoutes[] = {"/v1/completions", "/v1/chat/completions", "/v1/models", "/health",
                                        "/metrics", "/tokenize", "/detokenize", "/version"};
constexpr std::string_view kModelRoute = "/v1/models/{id}";

std::string_view path_of(std::string_view target) { return target.substr(0, target.find('?')); }

std::string_view route_of(std::string_view target) {
  target = path_of(target);
  for (std::string_view r : kRoutes) {
    if (target == r) return r;
  }
  if (target.starts_with("/v1/models/") && target.size() > 11) return kModelRoute;
  return "other";
}

// "%2F" and the like in a path segment; nullopt for a malformed escape.
std::optional<std::string> percent_decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) ? std::stoi(std::string(1, c), nullptr, 16) : -1; };
    if (i + 2 >= s.size()) return std::nullopt;
    const int hi = hex(s[i + 1]), lo = hex(s[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

bool needs_api_key(std::string_view route) {
  return route.starts_with("/v1/") || route == "/tokenize" || route == "/detokenize";
}

// Equal-time comparison: the time taken does not say how much of a guess was right.
bool same_secret(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i % std::max<size_t>(1, b.size())]);
  return diff == 0;
}

std::string chunk_frame(std::string_view data) { return fmt::format("{:x}\r\n{}\r\n", data.size(), data); }

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, HttpServer::Impl& server)
      : stream_(std::move(socket)), server_(server), probe_timer_(stream_.get_executor()) {}

  void start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->do_read(); });
  }

  // Drain: a connection waiting for its next request is closed; one serving a request
  // closes after the response (after_response checks draining).
  void close_if_idle() {
    net::post(stream_.get_executor(), [self = shared_from_this()] {
      if (!self->in_request_ && !self->header_started_) self->close();
    });
  }

 private:
  using Clock = std::chrono::steady_clock;

  // ---- reading: idle = no byte for idle_timeout; the header has header_timeout in all ----

  void do_read() {
    if (closed_) return;
    parser_.emplace();
    parser_->body_limit(server_.config.max_body_bytes);
    parser_->header_limit(kHeaderLimit);
    header_handled_ = false;
    header_started_ = false;
    http10_ = false;
    head_only_ = false;
    cors_origin_.clear();
    if (buffer_.size() > 0) {  // pipelined: the next request has begun
      start_header_clock();
      return parse_buffered();
    }
    read_some();
  }

  void start_header_clock() {
    header_started_ = true;
    header_deadline_ = Clock::now() + seconds(server_.config.header_timeout_seconds);
  }

  static Clock::duration seconds(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }

  // Raw reads, each with its own deadline, fed to the parser by hand: Beast's read operations
  // would hold one deadline for the whole header (and wait for all of it before parsing).
  void read_some() {
    Clock::time_point deadline = Clock::now() + seconds(server_.config.idle_timeout_seconds);
    if (header_started_ && !parser_->is_header_done()) deadline = std::min(deadline, header_deadline_);
    stream_.expires_at(deadline);
    stream_.async_read_some(buffer_.prepare(kReadChunk), [self = shared_from_this()](beast::error_code ec, size_t n) {
      if (ec) return self->on_read_error(ec);
      self->buffer_.commit(n);
      if (!self->header_started_) self->start_header_clock();
      self->parse_buffered();
    });
  }

  // Feeds what has arrived to the parser; reads more, writes 100 Continue, or handles the
  // request.
  void parse_buffered() {
    while (buffer_.size() > 0 && !parser_->is_done()) {
      beast::error_code ec;
      const size_t used = parser_->put(buffer_.data(), ec);
      buffer_.consume(used);
      if (ec == http::error::need_more) break;
      if (ec) return on_read_error(ec);
      if (parser_->is_header_done() && !header_handled_) {
        header_handled_ = true;
        begin_request();
        // curl and others wait for "100 Continue" before sending a large body.
        if (!parser_->is_done() && buffer_.size() == 0 && parser_->get().version() >= 11 &&
            beast::iequals(parser_->get()[http::field::expect], "100-continue")) {
          // Refuse before the client uploads a body that would be refused anyway.
          if (auto refusal = refusal_before_body()) {
            keep_alive_ = false;
            route_ = route_of(parser_->get().target());
            head_only_ = parser_->get().method() == http::verb::head;
            return respond_error(*refusal);
          }
          auto msg = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
          stream_.expires_after(kWriteTimeout);
          net::async_write(stream_, net::buffer(*msg), [self = shared_from_this(), msg](beast::error_code wec, size_t) {
            if (wec) return self->close();
            self->read_some();
          });
          return;
        }
      }
      if (used == 0) break;
    }
    if (parser_->is_done()) {
      keep_alive_ = parser_->get().keep_alive();
      return handle();
    }
    read_some();
  }

  void begin_request() {
    if (!in_request_) {
      in_request_ = true;
      ++server_.in_flight;
    }
  }
  void end_request() {
    if (in_request_) {
      in_request_ = false;
      --server_.in_flight;
    }
  }

  void on_read_error(beast::error_code ec) {
    if (closed_ || ec == net::error::operation_aborted) return;
    if (ec == http::error::body_limit) {
      begin_request();
      keep_alive_ = false;
      route_ = route_of(parser_->get().target());
      head_only_ = parser_->get().method() == http::verb::head;
      return respond_error(ApiError::too_large(
          fmt::format("the request body is over the limit of {} bytes", server_.config.max_body_bytes)));
    }
    if (ec == http::error::header_limit) {
      begin_request();
      keep_alive_ = false;
      route_ = "other";
      return respond(431, "application/json",
                     ApiError::invalid(fmt::format("the request headers are over {} bytes", kHeaderLimit)).body());
    }
    if (ec.category() == http::make_error_code(http::error::end_of_stream).category() && ec != http::error::end_of_stream &&
        ec != http::error::partial_message) {
      // Not HTTP: tell the client once, then hang up.
      begin_request();
      keep_alive_ = false;
      route_ = "other";
      return respond_error(ApiError::invalid("malformed HTTP request: " + ec.message()));
    }
    // A request cut off half-sent: Beast has closed the socket at the deadline, so no 408
    // can be written; it is counted.
    if (ec == beast::error::timeout && header_started_) server_.count_timeout();
    close();  // end of stream, timeout, reset
  }

  // ---- routing ----

  void handle() {
    auto& req = parser_->get();
    route_ = route_of(req.target());
    http10_ = req.version() < 11;
    head_only_ = req.method() == http::verb::head;
    const std::string_view origin = req[http::field::origin];
    cors_origin_ = server_.origin_allowed(origin) ? std::string(origin) : std::string();
    if (req.method() == http::verb::options) return options();
    if (server_.draining) {
      keep_alive_ = false;
      if (route_ == "/health") {
        return respond(503, "application/json", R"({"status":"draining"})", "Retry-After: 5\r\n");
      }
      return respond_error(ApiError::unavailable("the server is shutting down"));
    }
    if (auto refusal = auth_refusal(route_)) return respond_error(*refusal);
    const bool post = req.method() == http::verb::post;
    const bool get = req.method() == http::verb::get || head_only_;
    auto wrong_method = [&](const char* allowed) {
      ApiError e = ApiError::invalid(fmt::format("{} does not accept {}; use {}", route_,
                                                 std::string(req.method_string()), allowed));
      e.status = 405;
      respond(405, "application/json", e.body(), fmt::format("Allow: {}\r\n", allowed));
    };
    OpenAiApi& api = server_.api;
    if (route_ == "/v1/completions" || route_ == "/v1/chat/completions" || route_ == "/tokenize" ||
        route_ == "/detokenize") {
      if (!post) return wrong_method("POST");
      return hand_to_worker(std::move(req.body()));
    }
    if (route_ == "other") {
      return respond_error(ApiError::not_found(
          fmt::format("no route {} {}", std::string(req.method_string()), std::string(req.target().substr(0, 200)))));
    }
    if (!get) return wrong_method("GET, HEAD");
    if (route_ == "/health") return respond(200, "application/json", R"({"status":"ok"})");
    if (route_ == "/v1/models") return respond(200, "application/json", api.models().dump());
    if (route_ == kModelRoute) {
      const auto id = percent_decode(path_of(req.target()).substr(11));
      if (!id) return respond_error(ApiError::invalid("malformed %-escape in the model id"));
      auto model = api.model(*id);
      if (!model) return respond_error(model.error());
      return respond(200, "application/json", model->dump(-1, ' ', false, Json::error_handler_t::replace));
    }
    if (route_ == "/version") return respond(200, "application/json", Json{{"version", SLUICE_VERSION}}.dump());
    // /metrics
    HttpMetrics http_metrics;
    {
      MutexLock lock(server_.mu);
      http_metrics = server_.metrics;
      http_metrics.open_connections =
          std::count_if(server_.sessions.begin(), server_.sessions.end(), [](const auto& w) { return !w.expired(); });
    }
    http_metrics.buffered_bytes = server_.buffered_bytes.load();
    respond(200, "text/plain; version=0.0.4; charset=utf-8",
            prometheus_text(api.engine().metrics(), http_metrics, api.config().model_name));
  }

  // OPTIONS: a CORS preflight (Origin + Access-Control-Request-Method) is answered for the
  // origins in --allowed-origins and refused for others; a plain OPTIONS lists the methods.
  void options() {
    const auto& req = parser_->get();
    const char* allow = route_ == "/v1/completions" || route_ == "/v1/chat/completions" || route_ == "/tokenize" ||
                                route_ == "/detokenize"
                            ? "POST, OPTIONS"
                            : "GET, HEAD, OPTIONS";
    const std::string_view origin = req[http::field::origin];
    if (origin.empty() || req[http::field::access_control_request_method].empty()) {
      return respond(204, "", "", fmt::format("Allow: {}\r\n", allow));
    }
    if (cors_origin_.empty()) {
      ApiError e = ApiError::invalid(fmt::format("origin '{}' is not allowed (the server's --allowed-origins)",
                                                 std::string(origin.substr(0, 200))));
      e.status = 403;
      return respond_error(e);
    }
    std::string headers = std::string(req[http::field::access_control_request_headers]);
    if (headers.empty()) headers = "Authorization, Content-Type";
    respond(204, "", "",
            fmt::format("Access-Control-Allow-Methods: {}\r\nAccess-Control-Allow-Headers: {}\r\n"
                        "Access-Control-Max-Age: 600\r\n",
                        allow, headers));
  }

  // ---- request work on the worker threads ----

  struct WorkResult {
    bool generation = false;
    ApiResult<std::unique_ptr<Generation>> gen;
    ApiResult<std::string> json;
  };

  static WorkResult do_work(OpenAiApi& api, std::string_view route, const std::string& body) {
    WorkResult r;
    r.generation = route == "/v1/completions" || route == "/v1/chat/completions";
    try {
      auto parsed = parse_body(body);
      if (!parsed) {
        if (r.generation) r.gen = std::unexpected(parsed.error());
        else r.json = std::unexpected(parsed.error());
        return r;
      }
      if (route == "/v1/completions") {
        r.gen = api.start_completion(*parsed);
      } else if (route == "/v1/chat/completions") {
        r.gen = api.start_chat(*parsed);
      } else {
        auto result = route == "/tokenize" ? api.tokenize(*parsed) : api.detokenize(*parsed);
        if (result) r.json = result->dump(-1, ' ', false, Json::error_handler_t::replace);
        else r.json = std::unexpected(result.error());
      }
    } catch (const std::exception& e) {  // out of memory, or a bug: a 500, never a dead server
      const ApiError err = ApiError::internal(fmt::format("internal error: {}", e.what()));
      if (r.generation) r.gen = std::unexpected(err);
      else r.json = std::unexpected(err);
    }
    return r;
  }

  void hand_to_worker(std::string body) {
    auto self = shared_from_this();
    net::post(server_.workers, [self, body = std::move(body), route = route_]() mutable {
      auto result = std::make_shared<WorkResult>(do_work(self->server_.api, route, body));
      body = std::string();
      net::post(self->stream_.get_executor(), [self, result] { self->on_work_done(std::move(*result)); });
    });
  }

  void on_work_done(WorkResult r) {
    if (closed_) return;  // the client left while its request was parsed (a Generation dropped here cancels)
    if (r.generation) return start_generation(std::move(r.gen));
    if (!r.json) return respond_error(r.json.error());
    respond(200, "application/json", std::move(*r.json));
  }

  // ---- responses ----

  std::string head(int status, std::string_view content_type, std::string_view extra) {
    if (!keep_alive_ || server_.draining) close_after_ = true;
    std::string h = fmt::format("HTTP/1.1 {} {}\r\nServer: sluice\r\n", status,
                                std::string(http::obsolete_reason(static_cast<http::status>(status))));
    if (!content_type.empty()) h += fmt::format("Content-Type: {}\r\n", content_type);
    if (!cors_origin_.empty()) h += fmt::format("Access-Control-Allow-Origin: {}\r\nVary: Origin\r\n", cors_origin_);
    if (close_after_) h += "Connection: close\r\n";
    h += extra;
    return h;
  }

  void respond(int status, std::string_view content_type, std::string body, std::string extra_headers = {}) {
    server_.count_response(std::string(route_), status);
    std::string bytes = head(status, content_type, extra_headers);
    if (status != 204) bytes += fmt::format("Content-Length: {}\r\n", body.size());
    bytes += "\r\n";
    if (!head_only_ && status != 204) bytes += body;
    response_done_ = true;
    queue(std::move(bytes));
  }

  void respond_error(const ApiError& e) {
    respond(e.status, "application/json", e.body(),
            e.retry_after > 0 ? fmt::format("Retry-After: {}\r\n", e.retry_after) : std::string());
  }

  // ---- generation ----

  void start_generation(ApiResult<std::unique_ptr<Generation>> g) {
    if (!g) return respond_error(g.error());
    gen_ = std::move(*g);
    ++epoch_;
    peer_eof_ = false;
    if (gen_->streaming()) {
      server_.count_response(std::string(route_), 200);
      // HTTP/1.0 has no chunked encoding: the stream ends when the connection closes.
      if (http10_) close_after_ = true;
      queue(head(200, "text/event-stream",
                 http10_ ? "Cache-Control: no-cache\r\n" : "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n") +
            "\r\n");
    }
    // Engine output arrives on the engine thread; it only schedules a poll on this strand.
    auto weak = weak_from_this();
    auto executor = stream_.get_executor();
    gen_->on_output([weak, executor] {
      net::post(executor, [weak] {
        if (auto self = weak.lock()) self->on_engine_output();
      });
    });
    watch_disconnect();
    on_engine_output();
  }

  void on_engine_output() {
    if (!gen_ || closed_) return;
    std::string events;
    const bool done = gen_->poll(events);
    if (gen_->streaming()) {
      if (!events.empty()) queue(frame(events));
      if (done) {
        end_generation();
        response_done_ = true;
        queue(http10_ ? std::string() : std::string("0\r\n\r\n"));
      } else if (queued_bytes_ > server_.config.max_stream_buffer_bytes) {
        // The client stopped reading: cancel rather than buffer the rest of the answer.
        std::cerr << "sluice serve: a streaming client stopped reading (" << queued_bytes_
                  << " bytes unwritten, limit " << server_.config.max_stream_buffer_bytes
                  << "); its request is cancelled\n";
        gen_->cancel();
        end_generation();
        server_.count_slow_client();
        close();
      }
      return;
    }
    if (!done) return;
    auto body = gen_->response();
    end_generation();
    if (body) respond(200, "application/json", std::move(*body));
    else respond_error(body.error());
  }

  std::optional<ApiError> auth_refusal(std::string_view route) const {
    if (server_.config.api_key.empty() || !needs_api_key(route)) return std::nullopt;
    const std::string_view auth = parser_->get()[http::field::authorization];
    if (auth.empty()) return ApiError::unauthorized("missing API key: send the header 'Authorization: Bearer KEY'");
    if (!auth.starts_with("Bearer ") || !same_secret(auth.substr(7), server_.config.api_key)) {
      return ApiError::unauthorized("invalid API key");
    }
    return std::nullopt;
  }

  // Stream bytes as they go on the wire: a chunk, or (HTTP/1.0) as they are.
  std::string frame(std::string_view data) const { return http10_ ? std::string(data) : chunk_frame(data); }

  // The refusals handle() would make from the header alone (draining, API key, route,
  // method), for answering "Expect: 100-continue" without reading the body.
  std::optional<ApiError> refusal_before_body() const {
    const auto& req = parser_->get();
    const std::string_view route = route_of(req.target());
    if (server_.draining) return ApiError::unavailable("the server is shutting down");
    if (auto refusal = auth_refusal(route)) return refusal;
    if (route == "other") return ApiError::not_found("no route " + std::string(req.target().substr(0, 200)));
    return std::nullopt;
  }

  void end_generation() {
    gen_.reset();
    probe_timer_.cancel();
  }

  // While a request runs, the client sends nothing; the socket turning readable means it
  // closed or half-closed (recv sees end of stream), reset (an error), or pipelined its next
  // request (left for do_read).
  void watch_disconnect() {
    stream_.socket().async_wait(tcp::socket::wait_read, [self = shared_from_this(), epoch = epoch_](beast::error_code ec) {
      if (epoch != self->epoch_ || !self->gen_ || self->closed_) return;
      if (ec) {
        if (ec != net::error::operation_aborted) self->client_gone();
        return;
      }
      char c;
      const ssize_t n = ::recv(self->stream_.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0) return self->on_peer_eof();
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return self->client_gone();
      if (n < 0) self->watch_disconnect();
    });
  }

  // End of stream while a request runs: a close or a half-close. Probe until the response
  // is done: writing to a closed peer draws a reset, and the next write fails.
  void on_peer_eof() {
    peer_eof_ = true;  // what it sent before is still answered (after_response)
    probe(std::chrono::milliseconds(50));
  }

  void probe(Clock::duration next) {
    if (!gen_ || closed_) return;
    if (gen_->streaming()) {
      queue(frame(": waiting\n\n"));  // an SSE comment: clients ignore it
    } else if (!http10_) {
      queue("HTTP/1.1 100 Continue\r\n\r\n");  // a client must skip 1xx before the response
    } else {
      return;  // HTTP/1.0 allows no interim response: found out when the answer is written
    }
    probe_timer_.expires_after(next);
    probe_timer_.async_wait([self = shared_from_this(), epoch = epoch_](beast::error_code ec) {
      if (ec || epoch != self->epoch_) return;
      self->probe(seconds(self->server_.config.probe_seconds));
    });
  }

  void client_gone() {
    if (gen_) {
      gen_->cancel();
      end_generation();
      server_.count_disconnect();
    }
    close();
  }

  // ---- writing ----

  void queue(std::string bytes) {
    if (closed_) return;
    queued_bytes_ += bytes.size();
    server_.buffered_bytes += static_cast<int64_t>(bytes.size());
    queue_.push_back(std::move(bytes));
    if (!writing_) do_write();
  }

  void do_write() {
    if (closed_) return;
    if (queue_.empty()) {
      writing_ = false;
      if (response_done_ && !gen_) after_response();
      return;
    }
    writing_ = true;
    stream_.expires_after(kWriteTimeout);
    net::async_write(stream_, net::buffer(queue_.front()), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (self->closed_) return;
      if (ec) return self->client_gone();
      self->unqueue_front();
      self->do_write();
    });
  }

  void unqueue_front() {
    queued_bytes_ -= queue_.front().size();
    server_.buffered_bytes -= static_cast<int64_t>(queue_.front().size());
    queue_.pop_front();
  }

  void after_response() {
    response_done_ = false;
    head_only_ = false;
    end_request();
    if (close_after_ || server_.draining) return linger();
    // A half-closed client sends nothing more; requests it pipelined before are answered.
    if (peer_eof_ && buffer_.size() == 0) return linger();
    do_read();
  }

  // Closing with unread request bytes in the socket (a body refused with 413, say) would
  // send a reset that can destroy the response before the client reads it. So: stop
  // sending, read and drop what the client still sends (for up to a second), then close.
  void linger() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return close();
    stream_.expires_after(std::chrono::seconds(1));  // a deadline for the whole drain
    linger_read(std::make_shared<std::array<char, 16384>>());
  }
  void linger_read(std::shared_ptr<std::array<char, 16384>> scratch) {
    stream_.async_read_some(net::buffer(*scratch), [self = shared_from_this(), scratch](beast::error_code rec, size_t n) {
      if (rec) return self->close();
      self->lingered_ += n;
      if (self->lingered_ > (64u << 20)) return self->close();
      self->linger_read(scratch);
    });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    end_request();
    if (gen_) {
      gen_->cancel();
      end_generation();
    }
    probe_timer_.cancel();
    // The queue stays until the session is destroyed (a write may still hold its front);
    // its bytes no longer count as buffered.
    server_.buffered_bytes -= static_cast<int64_t>(queued_bytes_);
    queued_bytes_ = 0;
    beast::error_code ec;
    stream_.socket().close(ec);
  }

  beast::tcp_stream stream_;
  HttpServer::Impl& server_;
  net::steady_timer probe_timer_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::string_view route_ = "other";
  bool keep_alive_ = true;
  bool close_after_ = false;
  bool in_request_ = false;      // a request's header was read; its response is not fully written
  bool response_done_ = false;   // the last bytes of the response are queued
  bool closed_ = false;
  bool header_started_ = false;  // a byte of the next request has arrived
  bool header_handled_ = false;
  Clock::time_point header_deadline_;
  bool http10_ = false;          // the request is HTTP/1.0 (no interim responses)
  bool head_only_ = false;       // HEAD: headers without the body
  bool peer_eof_ = false;        // the client closed or half-closed while its request runs
  std::string cors_origin_;      // the request's Origin, when --allowed-origins allows it
  std::deque<std::string> queue_;
  size_t queued_bytes_ = 0;      // bytes in queue_ (counted in server_.buffered_bytes)
  bool writing_ = false;
  std::unique_ptr<Generation> gen_;
  uint64_t epoch_ = 0;           // tells a stale disconnect watch or probe from the current one
  size_t lingered_ = 0;          // bytes dropped while closing
};

}  // namespace

void HttpServer::Impl::accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
    if (ec) {
      // Out of descriptors and the like: say so, wait a little, keep serving.
      std::cerr << "sluice serve: accept failed: " << ec.message() << "\n";
      auto timer = std::make_shared<net::steady_timer>(control, std::chrono::milliseconds(100));
      timer->async_wait([this, timer](beast::error_code) { accept(); });
      return;
    }
    // Streamed tokens are small writes: without TCP_NODELAY, Nagle's algorithm holds each one
    // back until the client's (delayed, ~40 ms) ACK of the previous.
    beast::error_code opt_ec;
    socket.set_option(tcp::no_delay(true), opt_ec);
    if (config.send_buffer_bytes > 0) {
      socket.set_option(net::socket_base::send_buffer_size(config.send_buffer_bytes), opt_ec);
    }
    auto session = std::make_shared<Session>(std::move(socket), *this);
    {
      MutexLock lock(mu);
      std::erase_if(sessions, [](const std::weak_ptr<Session>& w) { return w.expired(); });
      sessions.push_back(session);
    }
    session->start();
    accept();
  });
}

Result<std::unique_ptr<HttpServer>> HttpServer::create(OpenAiApi& api, ServerConfig config) {
  auto impl = std::make_unique<Impl>(api, std::move(config));
  const ServerConfig& c = impl->config;
  beast::error_code ec;
  tcp::endpoint endpoint;
  if (const auto address = net::ip::make_address(c.host, ec); !ec) {
    endpoint = tcp::endpoint(address, c.port);
  } else {
    // A name ("localhost"): its first address.
    tcp::resolver resolver(impl->ioc);
    auto results = resolver.resolve(c.host, std::to_string(c.port), tcp::resolver::passive, ec);
    if (ec || results.empty()) {
      return Error("--host '{}' is neither an IP address nor a name that resolves ({})", c.host,
                   ec ? ec.message() : "no address");
    }
    endpoint = results.begin()->endpoint();
  }
  tcp::acceptor& a = impl->acceptor;
  a.open(endpoint.protocol(), ec);
  if (!ec) a.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(endpoint, ec);
  if (!ec) a.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return Error("cannot listen on {}:{}: {}", c.host, c.port, ec.message());
  std::unique_ptr<HttpServer> server(new HttpServer(std::move(impl)));
  server->port_ = server->impl_->acceptor.local_endpoint().port();
  return server;
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() {
  if (!threads_.empty() && !stopped_) drain_and_stop();
}

void HttpServer::start() {
  impl_->work.emplace(impl_->ioc.get_executor());
  impl_->signals.async_wait([this](beast::error_code ec, int signal) {
    if (ec) return;
    std::cerr << "sluice serve: " << (signal == SIGTERM ? "SIGTERM" : "SIGINT")
              << ": shutting down (a second signal cancels what still runs)\n";
    request_shutdown();
    impl_->signals.async_wait([this](beast::error_code ec2, int signal2) {
      if (ec2) return;
      std::cerr << "sluice serve: second " << (signal2 == SIGTERM ? "SIGTERM" : "SIGINT")
                << ": cancelling " << impl_->in_flight.load() << " request(s) and exiting\n";
      request_immediate_shutdown();
    });
  });
  impl_->accept();
  const int n = std::max(1, impl_->config.threads);
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { impl_->ioc.run(); });
}

void HttpServer::request_shutdown() {
  {
    MutexLock lock(impl_->mu);
    impl_->shutdown_requested = true;
  }
  impl_->cv.notify_all();
}

void HttpServer::request_immediate_shutdown() {
  impl_->drain_now = true;
  request_shutdown();
}

void HttpServer::run_until_shutdown() {
  {
    MutexLock lock(impl_->mu);
    while (!impl_->shutdown_requested) impl_->cv.wait(lock);
  }
  drain_and_stop();
}

HttpMetrics HttpServer::http_metrics() const {
  MutexLock lock(impl_->mu);
  return impl_->metrics;
}

int64_t HttpServer::requests_in_flight() const { return impl_->in_flight.load(); }

void HttpServer::drain_and_stop() {
  if (stopped_) return;
  stopped_ = true;
  Impl& s = *impl_;
  s.draining = true;
  // The listener stays open: new requests, /health among them, are answered 503.
  net::post(s.ioc, [&s] {
    std::vector<std::shared_ptr<Session>> live;
    {
      MutexLock lock(s.mu);
      for (auto& w : s.sessions) {
        if (auto p = w.lock()) live.push_back(std::move(p));
      }
    }
    for (auto& p : live) p->close_if_idle();
  });
  using clock = std::chrono::steady_clock;
  auto wait_until_idle = [&](clock::time_point deadline) {
    while (s.in_flight > 0 && clock::now() < deadline && !s.drain_now) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  wait_until_idle(clock::now() + std::chrono::milliseconds(static_cast<int64_t>(s.config.drain_seconds * 1000)));
  if (s.in_flight > 0 && !s.drain_now) {
    std::cerr << "sluice serve: " << s.in_flight.load() << " request(s) still running after "
              << s.config.drain_seconds << " s; cancelling them\n";
  }
  // Ends whatever is left (clients get an error event or a 503) and stops the engine thread,
  // so no engine callback can reach the event loop after it stops.
  s.api.engine().shutdown();
  s.drain_now = false;  // the cancelled requests' last bytes may still go out (briefly)
  wait_until_idle(clock::now() + std::chrono::seconds(2));
  std::promise<void> closed;
  net::post(s.control, [&s, &closed] {
    beast::error_code ec;
    s.acceptor.close(ec);
    s.signals.cancel(ec);
    closed.set_value();
  });
  closed.get_future().wait();
  s.workers.stop();
  s.workers.join();
  s.work.reset();
  s.ioc.stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

}  // namespace sluice::server
