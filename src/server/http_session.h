// One HTTP connection of the server (not part of its interface; see http_server.h). Its work is
// in two files: http_session.cc reads requests (raw reads fed to Beast's parser, idle and
// header deadlines), routes them and hands request work to the workers; http_session_write.cc
// answers them: responses, streaming a Generation's output, probing half-closed clients,
// bounded writing and the lingering close.
//
// Every member runs on the connection's executor (an I/O thread), one at a time; request work
// (do_work) runs on a worker and posts its result back.
#pragma once

#include <array>
#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <boost/beast/http.hpp>

#include "server/api.h"
#include "server/http_server_impl.h"

namespace sluice::server {

namespace http = beast::http;

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
  Clock::duration write_timeout() const {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(server_.config.write_timeout_seconds));
  }

  // ---- reading (http_session.cc): idle = no byte for idle_timeout; the header has
  // header_timeout in all ----

  void do_read();
  void start_header_clock();
  static Clock::duration seconds(double s);
  // Raw reads, each with its own deadline, fed to the parser by hand: Beast's read operations
  // would hold one deadline for the whole header (and wait for all of it before parsing).
  void read_some();
  // Feeds what has arrived to the parser; reads more, writes 100 Continue, or handles the
  // request.
  void parse_buffered();
  void begin_request();
  void end_request();
  void on_read_error(beast::error_code ec);

  // ---- routing (http_session.cc) ----

  // What every response to this head needs: its route, HEAD or not, the version, and the CORS
  // origin (an error answered before the body, a 413 say, is read by the browser too).
  void note_head();
  // RFC 9112: an HTTP/1.1 request without Host is a 400 (section 3.2); a transfer coding other
  // than chunked alone is a 501 (section 6.1). A compressed body is a 415: it would otherwise
  // reach the JSON reader as bytes.
  std::optional<ApiError> framing_refusal() const;
  void handle();
  // OPTIONS: a CORS preflight (Origin + Access-Control-Request-Method) is answered for the
  // origins in --allowed-origins and refused for others; a plain OPTIONS lists the methods.
  void options();
  std::optional<ApiError> auth_refusal(std::string_view route) const;
  // The refusals handle() would make from the header alone (draining, API key, route,
  // method), for answering "Expect: 100-continue" without reading the body.
  std::optional<ApiError> refusal_before_body() const;

  // ---- request work on the worker threads (http_session.cc) ----

  struct WorkResult {
    bool generation = false;
    ApiResult<std::unique_ptr<Generation>> gen;
    ApiResult<std::string> json;
  };
  static WorkResult do_work(OpenAiApi& api, std::string_view route, const std::string& body);
  void hand_to_worker(std::string body);
  void on_work_done(WorkResult r);

  // ---- responses (http_session_write.cc) ----

  std::string head(int status, std::string_view content_type, std::string_view extra);
  void respond(int status, std::string_view content_type, std::string body, std::string extra_headers = {});
  void respond_error(const ApiError& e);

  // ---- generation (http_session_write.cc) ----

  void start_generation(ApiResult<std::unique_ptr<Generation>> g);
  void on_engine_output();
  // Stream bytes as they go on the wire: a chunk, or (HTTP/1.0) as they are.
  std::string frame(std::string_view data) const;
  void end_generation();
  // While a request runs, the client sends nothing; the socket turning readable means it
  // closed or half-closed (recv sees end of stream), reset (an error), or pipelined its next
  // request (left for do_read).
  void watch_disconnect();
  // End of stream while a request runs: a close or a half-close. Probe until the response
  // is done: writing to a closed peer draws a reset, and the next write fails.
  void on_peer_eof();
  void probe(Clock::duration next);
  void client_gone();

  // ---- writing (http_session_write.cc) ----

  void queue(std::string bytes);
  void do_write();
  void unqueue_front();
  void after_response();
  // Closing with unread request bytes in the socket (a body refused with 413, say) would
  // send a reset that can destroy the response before the client reads it. So: stop
  // sending, read and drop what the client still sends (for up to a second), then close.
  void linger();
  void linger_read(std::shared_ptr<std::array<char, 16384>> scratch);
  void close();

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
  size_t front_written_ = 0;     // bytes of queue_.front() written so far
  bool writing_ = false;
  std::unique_ptr<Generation> gen_;
  std::shared_ptr<Session> generating_;  // the session itself, while gen_ runs
  uint64_t epoch_ = 0;           // tells a stale disconnect watch or probe from the current one
  size_t lingered_ = 0;          // bytes dropped while closing
};

}  // namespace sluice::server
