// HttpServer: HTTP/1.1 on Boost.Beast/Asio in front of an OpenAiApi.
//
//   acceptor --> Session (one per connection, on its own strand)
//                  read request (Beast parser, body limit) -> route -> JSON response
//                  or: start a Generation -> engine output wakes the strand (on_output)
//                      -> poll -> SSE chunks / one JSON body -> next request (keep-alive)
//
// HTTP threads never block on the engine and never touch its state: they submit requests and
// read result streams when told there is something to read. A client that disconnects while
// its request runs is noticed at once (the socket becomes readable with EOF, or a write
// fails) and its request is cancelled, which frees its KV blocks.
//
// Responses are written by hand (status line, headers, chunked framing): they are few and
// fixed. Requests are parsed by Beast's parser, the part that meets hostile input.
//
// Shutdown (SIGTERM/SIGINT or shutdown()): stop accepting; idle keep-alive connections are
// closed, new requests on open ones get 503; in-flight requests run to completion for up
// to drain_seconds; whatever is left is then cancelled (clients get an error event or a 503);
// the threads stop.
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
  double idle_timeout_seconds = 60;         // keep-alive connections idle longer are closed
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
