// HttpConnection: a small HTTP/1.1 client on Boost.Beast for OpenAI-style JSON APIs.
//
// One connection sends one request at a time and keeps the socket open between requests while
// the server allows it (keep-alive). A 2xx body can be handed to a callback piece by piece as it
// is read, whatever its framing (Content-Length, chunked, or ended by close), which is what a
// streamed completion (server-sent events, see sse.h) needs; otherwise it is collected.
//
// Failures are values of kind ErrorKind, so that callers can answer by kind (a load generator
// counts them, a router retries a refused connection but not a 400): connection refused,
// timeout, connection closed mid-response, malformed HTTP, a non-2xx status (with its body),
// cancelled. They are not Statuses because a Status has no place for the HTTP status and body;
// `HttpError::to_status()` gives one for callers that only report.
//
// Asio is used with C++20 coroutines: `co_await connection.request(...)` on an io_context.
// NOTE: g++ 12 destroys a braced temporary inside a co_await expression twice (a compiler bug):
// write `HttpRequest r{...}; co_await c.request(r);`, never `co_await c.request(HttpRequest{...})`.
// Thread-safety: a connection belongs to its executor; call it (and cancel()) only from there.
// Beast stays out of this header so that only http_client.cc pays for compiling it.
#pragma once

#include <chrono>
#include <expected>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include "common/status.h"
#include "common/url.h"

namespace sluice::http {

enum class ErrorKind {
  kConnect,    // the host did not resolve, or refused or dropped the connection attempt
  kTimeout,    // connecting or the whole request took longer than its limit
  kClosed,     // the connection closed or reset before the response was complete
  kProtocol,   // the response is not valid HTTP/1.1, or is too large
  kStatus,     // a complete response with a status outside 2xx
  kCancelled,  // HttpConnection::cancel() stopped it
};
std::string_view error_kind_name(ErrorKind kind);  // "connect", "timeout", ...

struct HttpError {
  ErrorKind kind = ErrorKind::kProtocol;
  int status = 0;       // kStatus: the HTTP status code
  std::string message;  // for a person: what was asked, and what happened
  std::string body;     // kStatus: the response body

  Status to_status() const;
};

template <typename T>
using HttpResult = std::expected<T, HttpError>;

struct Header {
  std::string name;
  std::string value;
};

// ASCII case-insensitive equality, as header names compare.
bool iequals(std::string_view a, std::string_view b);

// The value of the first header called `name` (case-insensitive), or "" if there is none.
std::string_view find_header(const std::vector<Header>& headers, std::string_view name);

struct HttpRequest {
  std::string method = "GET";
  std::string target = "/";    // path and query, e.g. Url::target("/models")
  std::vector<Header> headers;  // Host, User-Agent and Content-Length are set by the connection
  std::string body;             // when not empty, sent as application/json unless a header says otherwise
};

struct HttpResponse {
  int status = 0;
  std::vector<Header> headers;
  std::string body;  // empty when the body was handed to a BodyFn

  std::string_view header(std::string_view name) const { return find_header(headers, name); }
};

struct HttpOptions {
  std::chrono::milliseconds connect_timeout{10'000};
  std::chrono::milliseconds request_timeout{300'000};  // from sending to the last byte of the response
  size_t max_collected_body = 64u << 20;  // a collected body larger than this is a kProtocol error
  std::string user_agent = "sluice";
};

// Receives the pieces of a 2xx response body in order, as they are read.
using BodyFn = std::function<void(std::string_view)>;

class HttpConnection {
 public:
  HttpConnection(boost::asio::any_io_executor executor, Url url, HttpOptions options = {});
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // Sends `request` and reads its response, connecting first if needed. With `on_body`, a 2xx
  // body goes to it as it arrives and HttpResponse::body stays empty. A non-2xx response is an
  // error of kind kStatus carrying the body.
  // NOTE: a server may close an idle keep-alive connection just as a request is sent on it. When
  // a reused connection closes before any byte of the response, the request is sent once more on
  // a new connection, as curl and browsers do: servers close idle connections between requests,
  // so such a request was not acted on.
  // REQUIRES: no other request in flight on this connection.
  boost::asio::awaitable<HttpResult<HttpResponse>> request(HttpRequest request, BodyFn on_body = {});

  // Stops the request in flight, which ends with kCancelled, and closes the connection.
  void cancel();

  bool is_open() const;
  const Url& url() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The first model a GET .../models answer lists (OpenAI's {"data": [{"id": ...}]}), with the
// system_fingerprint its entry carries where it has one (sluice serve's); none when the body
// lists no model.
struct ListedModel {
  std::string id;
  std::string system_fingerprint;  // "" when not reported
};
std::optional<ListedModel> first_listed_model(std::string_view body);

// One request on a new connection with an io_context of its own, blocking until it ends. For
// one-off calls (GET /v1/models) and tests; a load wants HttpConnection on one io_context.
HttpResult<HttpResponse> fetch(const Url& url, HttpRequest request, const HttpOptions& options = {});

}  // namespace sluice::http
