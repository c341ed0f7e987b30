// One HTTP connection: reading requests (raw reads fed to Beast's parser, idle and header
// deadlines), routing, handing request work to the workers, streaming a Generation's output,
// probing half-closed clients, bounded writing, lingering close. See http_server.h.
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <deque>
#include <iostream>

#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include "common/secret.h"
#include "server/http_server_impl.h"

namespace sluice::server {

namespace http = beast::http;

namespace {

constexpr auto kWriteTimeout = std::chrono::seconds(60);
constexpr size_t kHeaderLimit = 64 << 10;
constexpr size_t kReadChunk = 64 << 10;

// The routes this server knows, for dispatch and as metric labels.
constexpr std::string_view kRoutes[] = {"/v1/completions", "/v1/chat/completions", "/v1/models", "/health",
                                        "/metrics", "/tokenize", "/detokenize", "/version"};
constexpr std::string_view kModelRoute = "/v1/models/{id}";

// The path of a request target: origin-form ("/v1/models?x"), or absolute-form
// ("http://host/v1/models", which RFC 9112 section 3.2.2 says a server must accept).
std::string_view path_of(std::string_view target) {
  for (std::string_view scheme : {"http://", "https://"}) {
    if (target.size() > scheme.size() && beast::iequals(target.substr(0, scheme.size()), scheme)) {
      const size_t slash = target.find('/', scheme.size());
      target = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
      break;
    }
  }
  return target.substr(0, target.find('?'));
}

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

std::string chunk_frame(std::string_view data) { return fmt::format("{:x}\r\n{}\r\n", data.size(), data); }

}  // namespace

// Declared in http_server_impl.h; defined only here.
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
      if (!self->in_request_ && (!self->header_started_ || self->blank_only_)) self->close();
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
    blank_only_ = false;
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
    // Empty lines before a request line are ignored (RFC 9112 section 2.2): some clients send a
    // CRLF after a POST body.
    while (!parser_->got_some() && buffer_.size() > 0) {
      const char c = *static_cast<const char*>(buffer_.data().data());
      if (c != '\r' && c != '\n') break;
      buffer_.consume(1);
    }
    if (!parser_->got_some() && buffer_.size() == 0) {
      // Only empty lines: the header clock runs on (a client sending nothing else would hold
      // the connection for ever), but its end is an idle close, not a timed-out request.
      blank_only_ = true;
      return read_some();
    }
    blank_only_ = false;
    while (buffer_.size() > 0 && !parser_->is_done()) {
      beast::error_code ec;
      const size_t used = parser_->put(buffer_.data(), ec);
      buffer_.consume(used);
      if (ec == http::error::need_more) break;
      if (ec) return on_read_error(ec);
      if (parser_->is_header_done() && !header_handled_) {
        header_handled_ = true;
        begin_request();
        // A head this server cannot frame or decode is answered before any body is read.
        if (auto refusal = framing_refusal()) {
          keep_alive_ = false;
          note_head();
          return respond_error(*refusal);
        }
        // curl and others wait for "100 Continue" before sending a large body.
        if (!parser_->is_done() && buffer_.size() == 0 && parser_->get().version() >= 11 &&
            beast::iequals(parser_->get()[http::field::expect], "100-continue")) {
          // Refuse before the client uploads a body that would be refused anyway.
          if (auto refusal = refusal_before_body()) {
            keep_alive_ = false;
            note_head();
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
      note_head();
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
    if ((ec == net::error::eof || ec == http::error::partial_message) && parser_->is_header_done() &&
        !parser_->is_done()) {
      // The client stopped sending (a half-close) before the body its header declared: it may
      // still read the answer.
      begin_request();
      keep_alive_ = false;
      note_head();
      return respond_error(ApiError::invalid("the request body ended before the length its header declared"));
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
    if (ec == beast::error::timeout && header_started_ && !blank_only_) server_.count_timeout();
    close();  // end of stream, timeout, reset
  }

  // ---- routing ----

  // What every response to this head needs: its route, HEAD or not, the version, and the CORS
  // origin (an error answered before the body, a 413 say, is read by the browser too).
  void note_head() {
    const auto& req = parser_->get();
    route_ = route_of(req.target());
    http10_ = req.version() < 11;
    head_only_ = req.method() == http::verb::head;
    const std::string_view origin = req[http::field::origin];
    cors_origin_ = server_.origin_allowed(origin) ? std::string(origin) : std::string();
  }

  // RFC 9112: an HTTP/1.1 request without Host is a 400 (section 3.2); a transfer coding other
  // than chunked alone is a 501 (section 6.1). A compressed body is a 415: it would otherwise
  // reach the JSON reader as bytes.
  std::optional<ApiError> framing_refusal() const {
    const auto& req = parser_->get();
    if (req.version() >= 11 && req.find(http::field::host) == req.end()) {
      return ApiError::invalid("an HTTP/1.1 request needs a Host header");
    }
    // One Host, one Authorization: with two, the request means different things to different
    // readers (a proxy that checks the first, a server that uses the last).
    for (http::field f : {http::field::host, http::field::authorization}) {
      if (req.count(f) > 1) return ApiError::invalid(fmt::format("the request has more than one {} header", http::to_string(f)));
    }
    if (req.version() < 11 && req.find(http::field::transfer_encoding) != req.end()) {
      return ApiError::invalid("HTTP/1.0 has no Transfer-Encoding: send the body with Content-Length");
    }
    if (auto te = req.find(http::field::transfer_encoding); te != req.end() && !beast::iequals(te->value(), "chunked")) {
      ApiError e = ApiError::invalid(fmt::format("Transfer-Encoding '{}' is not supported: send the body with "
                                                 "Content-Length or 'chunked' alone", std::string(te->value().substr(0, 100))));
      e.status = 501;
      return e;
    }
    if (auto ce = req.find(http::field::content_encoding); ce != req.end() && !beast::iequals(ce->value(), "identity")) {
      ApiError e = ApiError::invalid(fmt::format("Content-Encoding '{}' is not supported: send the body uncompressed",
                                                 std::string(ce->value().substr(0, 100))));
      e.status = 415;
      return e;
    }
    return std::nullopt;
  }

  void handle() {
    auto& req = parser_->get();
    note_head();
    if (req.method() == http::verb::options) return options();
    // While draining: no new work. /metrics is still read (no work), so that the last scrape
    // sees the final counts; it goes through the API key check below as always.
    if (server_.draining && route_ != "/metrics") {
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
    if (close_after_) {
      h += "Connection: close\r\n";
    } else if (http10_) {
      h += "Connection: keep-alive\r\n";  // an HTTP/1.0 client takes a close unless told (RFC 9112 9.3)
    }
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
    std::string extra = e.retry_after > 0 ? fmt::format("Retry-After: {}\r\n", e.retry_after) : std::string();
    if (e.status == 401) extra += "WWW-Authenticate: Bearer\r\n";  // RFC 9110 section 11.6.1
    respond(e.status, "application/json", e.body(), extra);
  }

  // ---- generation ----

  void start_generation(ApiResult<std::unique_ptr<Generation>> g) {
    if (!g) return respond_error(g.error());
    gen_ = std::move(*g);
    // The engine holds only a weak reference, and the disconnect watch is not re-armed once
    // the client has sent something (a pipelined request, a stray CRLF, an HTTP/1.0
    // half-close): the session keeps itself until its answer is done.
    generating_ = shared_from_this();
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
    if (!bearer_is(auth, server_.config.api_key)) return ApiError::unauthorized("invalid API key");
    return std::nullopt;
  }

  // Stream bytes as they go on the wire: a chunk, or (HTTP/1.0) as they are.
  std::string frame(std::string_view data) const { return http10_ ? std::string(data) : chunk_frame(data); }

  // The refusals handle() would make from the header alone (draining, API key, route,
  // method), for answering "Expect: 100-continue" without reading the body.
  std::optional<ApiError> refusal_before_body() const {
    const auto& req = parser_->get();
    const std::string_view route = route_of(req.target());
    if (server_.draining && route != "/metrics") return ApiError::unavailable("the server is shutting down");
    if (auto refusal = auth_refusal(route)) return refusal;
    if (route == "other") return ApiError::not_found("no route " + std::string(req.target().substr(0, 200)));
    return std::nullopt;
  }

  void end_generation() {
    gen_.reset();
    probe_timer_.cancel();
    // Released after the caller returns (it may still use the session).
    if (generating_) net::post(stream_.get_executor(), [keep = std::move(generating_)] {});
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
      server_.count_disconnect();  // before the cancel: whoever sees the engine idle sees the count
      gen_->cancel();
      end_generation();
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
  bool blank_only_ = false;      // ...but only empty lines so far
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
  std::shared_ptr<Session> generating_;  // the session itself, while gen_ runs
  uint64_t epoch_ = 0;           // tells a stale disconnect watch or probe from the current one
  size_t lingered_ = 0;          // bytes dropped while closing
};


std::shared_ptr<Session> make_session(tcp::socket socket, HttpServer::Impl& server) {
  return std::make_shared<Session>(std::move(socket), server);
}

void start_session(const std::shared_ptr<Session>& session) { session->start(); }

void close_session_if_idle(const std::shared_ptr<Session>& session) { session->close_if_idle(); }

}  // namespace sluice::server
