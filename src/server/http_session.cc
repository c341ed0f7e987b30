// One HTTP connection, reading: raw reads fed to Beast's parser with idle and header deadlines,
// routing, and request work handed to the workers (http_session.h). See http_server.h.
#include "server/http_session.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/secret.h"

namespace sluice::server {
namespace {

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

}  // namespace

void Session::do_read() {
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

void Session::start_header_clock() {
  header_started_ = true;
  header_deadline_ = Clock::now() + seconds(server_.config.header_timeout_seconds);
}

Session::Clock::duration Session::seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

void Session::read_some() {
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

void Session::parse_buffered() {
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
        stream_.expires_after(write_timeout());
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

void Session::begin_request() {
  if (!in_request_) {
    in_request_ = true;
    ++server_.in_flight;
  }
}

void Session::end_request() {
  if (in_request_) {
    in_request_ = false;
    --server_.in_flight;
  }
}

void Session::on_read_error(beast::error_code ec) {
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
    // Beast's "bad version" stands for any request line it cannot split as METHOD TARGET
    // HTTP/1.x CRLF: a bare LF, a space in the target, HTTP/2's preface. Say what is served.
    const std::string why = ec == http::error::bad_version
                                ? "the request line must be METHOD TARGET HTTP/1.1 (or HTTP/1.0) ending in CRLF "
                                  "(a space in the target as %20; HTTP/2 and bare LF line ends are not served)"
                                : ec.message();
    return respond_error(ApiError::invalid("malformed HTTP request: " + why));
  }
  // A request cut off half-sent: Beast has closed the socket at the deadline, so no 408
  // can be written; it is counted.
  if (ec == beast::error::timeout && header_started_ && !blank_only_) server_.count_timeout();
  close();  // end of stream, timeout, reset
}

void Session::note_head() {
  const auto& req = parser_->get();
  route_ = route_of(req.target());
  http10_ = req.version() < 11;
  head_only_ = req.method() == http::verb::head;
  const std::string_view origin = req[http::field::origin];
  cors_origin_ = server_.origin_allowed(origin) ? std::string(origin) : std::string();
}

std::optional<ApiError> Session::framing_refusal() const {
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

void Session::handle() {
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

void Session::options() {
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

Session::WorkResult Session::do_work(OpenAiApi& api, std::string_view route, const std::string& body) {
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

void Session::hand_to_worker(std::string body) {
  auto self = shared_from_this();
  net::post(server_.workers, [self, body = std::move(body), route = route_]() mutable {
    auto result = std::make_shared<WorkResult>(do_work(self->server_.api, route, body));
    body = std::string();
    net::post(self->stream_.get_executor(), [self, result] { self->on_work_done(std::move(*result)); });
  });
}

void Session::on_work_done(WorkResult r) {
  if (closed_) return;  // the client left while its request was parsed (a Generation dropped here cancels)
  if (r.generation) return start_generation(std::move(r.gen));
  if (!r.json) return respond_error(r.json.error());
  respond(200, "application/json", std::move(*r.json));
}

std::optional<ApiError> Session::auth_refusal(std::string_view route) const {
  if (server_.config.api_key.empty() || !needs_api_key(route)) return std::nullopt;
  const std::string_view auth = parser_->get()[http::field::authorization];
  if (auth.empty()) return ApiError::unauthorized("missing API key: send the header 'Authorization: Bearer KEY'");
  if (!bearer_is(auth, server_.config.api_key)) return ApiError::unauthorized("invalid API key");
  return std::nullopt;
}

std::optional<ApiError> Session::refusal_before_body() const {
  const auto& req = parser_->get();
  const std::string_view route = route_of(req.target());
  if (server_.draining && route != "/metrics") return ApiError::unavailable("the server is shutting down");
  if (auto refusal = auth_refusal(route)) return refusal;
  if (route == "other") return ApiError::not_found("no route " + std::string(req.target().substr(0, 200)));
  return std::nullopt;
}

std::shared_ptr<Session> make_session(tcp::socket socket, HttpServer::Impl& server) {
  return std::make_shared<Session>(std::move(socket), server);
}

void start_session(const std::shared_ptr<Session>& session) { session->start(); }

void close_session_if_idle(const std::shared_ptr<Session>& session) { session->close_if_idle(); }

}  // namespace sluice::server

