// HttpServer: HTTP/1.1 on Boost.Beast/Asio in front of an OpenAiApi.
//
//   acceptor --> Session (one per connection, on its own strand)
//                  read request (Beast parser, limits) -> route
//                  /health, /metrics, /v1/models, ...: answered on the strand
//                  generation, tokenize: body parsed, prompt tokenized, request submitted on a
//                      worker thread -> back to the strand -> engine output wakes the strand
//                      (on_output) -> poll -> SSE chunks / one JSON body -> next request
//
// HTTP threads only move bytes: they never block on the engine, never touch its state, and
// never do a request's CPU work (JSON parsing, chat template, tokenizing: the workers do), so
// /health and /metrics answer while requests of megabytes are being parsed.
//
// Timeouts: idle_timeout_seconds is how long a connection may go without a byte from the
// client (between requests, or while it sends one); header_timeout_seconds bounds the whole
// header of a request from its first byte (against clients that send one byte a second). A
// body has only the idle timeout (a slow upload is fine while bytes keep coming). A request
// cut off half-sent is closed without an answer (the stream's deadline closes the socket) and
// counted. "Expect: 100-continue" is answered only for HTTP/1.1, and a request that would be
// refused from its header alone (draining, API key, unknown route) is refused at once.
// HTTP/1.0 streams are sent unframed and end with the connection.
//
// Clients that go away: a client that closes while its request runs has the request
// cancelled at once, which frees its KV blocks. A client that only half-closes (shutdown
// SHUT_WR after sending, as `nc -N` does) is still reading: its response is finished. The two
// look alike (an end of stream) until something is written: the server then writes a probe
// a client must ignore (an SSE comment, or "100 Continue" before a non-streamed response's
// head), every probe_seconds, and a full close shows as a reset.
//
// Backpressure: a streaming client that stops reading while tokens keep coming has its
// response queued in memory; past max_stream_buffer_bytes unwritten, its request is cancelled
// and the connection closed (counted in sluice_http_slow_client_cancels_total). The kernel's
// socket buffer comes on top; nothing else grows. An answer within that bound waits for the
// client; one that takes nothing of it (written in slices of 64 KiB, each with its own deadline)
// for write_timeout_seconds has its connection closed, which frees the bytes (counted in
// sluice_http_write_timeouts_total, not as a disconnect).
//
// Responses are written by hand (status line, headers, chunked framing): they are few and
// fixed. Requests are parsed by Beast's parser, the part that meets hostile input.
//
// Shutdown (SIGTERM/SIGINT or request_shutdown()): idle keep-alive connections are closed;
// the listener stays open, and every new request is answered 503 (/health too, so a load
// balancer takes the replica out); in-flight requests run to completion for up to
// drain_seconds; whatever is left is then cancelled (clients get an error event or a 503);
// the threads stop. A second signal ends the drain at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "server/api.h"
#include "server/prometheus.h"

namespace sluice::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;                     // 0: any free port (see HttpServer::port)
  int threads = 2;                          // HTTP threads
  std::string api_key;                      // non-empty: /v1/*, /tokenize and /detokenize need it
  size_t max_body_bytes = 8 << 20;          // larger bodies get 413
  double drain_seconds = 30;                // how long in-flight requests may finish on shutdown
  double idle_timeout_seconds = 60;         // no byte from the client this long: closed
  double header_timeout_seconds = 20;       // a request's headers must all arrive within this
  size_t max_stream_buffer_bytes = 1 << 20; // unwritten stream bytes past this: request cancelled
  double write_timeout_seconds = 60;        // a client that takes nothing of a write this long: closed
  double probe_seconds = 1;                 // how often a half-closed client is probed
  int send_buffer_bytes = 0;                // SO_SNDBUF of each connection; 0: the kernel's default
  std::vector<std::string> allowed_origins; // CORS: origins browsers may call from ("*": any)
};

class HttpServer {
 public:
  // Binds and listens (errors: a bad address, a port in use); serves after start().
  static Result<std::unique_ptr<HttpServer>> create(OpenAiApi& api, ServerConfig config);
  ~HttpServer();

  uint16_t port() const { return port_; }
  void start();
  // Blocks until SIGINT or SIGTERM arrives (or request_shutdown() is called), then drains
  // and stops as described above.
  void run_until_shutdown();
  void request_shutdown();
  // What a second SIGINT/SIGTERM does: ends the drain at once, cancelling what runs.
  void request_immediate_shutdown();

  HttpMetrics http_metrics() const;
  // Requests read whose response is not fully written yet.
  int64_t requests_in_flight() const;

  struct Impl;  // shared with the connections (http_server.cc)

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  void drain_and_stop();

  std::unique_ptr<Impl> impl_;
  std::vector<std::thread> threads_;
  uint16_t port_ = 0;
  bool stopped_ = false;
};

}  // namespace sluice::server
