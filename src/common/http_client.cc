#include "common/http_client.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <optional>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <nlohmann/json.hpp>
#include <openssl/ssl.h>

namespace sluice::http {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace ssl = boost::asio::ssl;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
constexpr auto kTuple = net::as_tuple(net::use_awaitable);

// A body in an error message: the first line or so, enough to show a JSON error.
std::string excerpt(std::string_view body) {
  constexpr size_t kMax = 300;
  std::string s(body.substr(0, kMax));
  std::replace(s.begin(), s.end(), '\n', ' ');
  if (body.size() > kMax) s += "...";
  return s;
}

// One TLS context for every client connection of the process: the system's trusted
// certificates (OpenSSL's default paths, which SSL_CERT_FILE and SSL_CERT_DIR override, as for
// curl), TLS 1.2 or later, peers verified. Loading the store once keeps a connection cheap.
ssl::context& client_tls_context() {
  static ssl::context* context = [] {
    auto* c = new ssl::context(ssl::context::tls_client);
    c->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                   ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
    boost::system::error_code ignored;  // no store at all: every handshake fails, with a message
    c->set_default_verify_paths(ignored);
    c->set_verify_mode(ssl::verify_peer);
    return c;
  }();
  return *context;
}

// What OpenSSL says about a failed handshake, e.g. "certificate verify failed (self-signed
// certificate)".
std::string tls_error(const beast::error_code& ec, SSL* ssl) {
  std::string message = ec.message();
  if (ssl != nullptr) {
    const long verify = SSL_get_verify_result(ssl);
    if (verify != X509_V_OK) message += fmt::format(" ({})", X509_verify_cert_error_string(verify));
  }
  return message;
}

}  // namespace

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kConnect: return "connect";
    case ErrorKind::kTimeout: return "timeout";
    case ErrorKind::kClosed: return "closed";
    case ErrorKind::kProtocol: return "protocol";
    case ErrorKind::kStatus: return "status";
    case ErrorKind::kCancelled: return "cancelled";
  }
  return "unknown";
}

Status HttpError::to_status() const {
  StatusCode code = StatusCode::kError;
  if (kind == ErrorKind::kStatus && (status == 429 || status == 503)) code = StatusCode::kOverloaded;
  if (kind == ErrorKind::kStatus && status >= 400 && status < 500 && status != 429) code = StatusCode::kInvalid;
  if (kind == ErrorKind::kConnect) code = StatusCode::kUnavailable;
  return Status::error(message, code);
}

std::string_view find_header(const std::vector<Header>& headers, std::string_view name) {
  for (const Header& h : headers) {
    if (iequals(h.name, name)) return h.value;
  }
  return {};
}

struct HttpConnection::Impl {
  Impl(net::any_io_executor ex, Url u, HttpOptions o)
      : executor(ex), plain(ex), resolver(ex), url(std::move(u)), options(std::move(o)) {}

  net::any_io_executor executor;
  // Plain HTTP reads and writes `plain`; HTTPS a TLS stream over a TCP stream of its own, made
  // anew for each connection (a TLS stream is not reused after its connection ends).
  beast::tcp_stream plain;
  std::optional<beast::ssl_stream<beast::tcp_stream>> tls;
  tcp::resolver resolver;
  beast::flat_buffer buffer;
  Url url;
  HttpOptions options;
  bool connected = false;
  bool cancelled = false;  // set by cancel(); the failing operation then reports kCancelled

  // "POST http://host:port/v1/completions", the start of every error message.
  std::string what(const HttpRequest& r) const {
    return fmt::format("{} {}://{}{}", r.method, url.tls ? "https" : "http", url.authority(), r.target);
  }

  beast::tcp_stream& tcp_layer() { return tls ? beast::get_lowest_layer(*tls) : plain; }

  HttpError fail(const HttpRequest& r, ErrorKind kind, std::string_view message) const {
    return HttpError{cancelled ? ErrorKind::kCancelled : kind, 0, fmt::format("{}: {}", what(r), cancelled ? "cancelled" : message), {}};
  }

  // Maps an error of a read or write on an open connection.
  HttpError io_error(const HttpRequest& r, beast::error_code ec, std::string_view during) const {
    if (ec == beast::error::timeout) {
      return fail(r, ErrorKind::kTimeout,
                  fmt::format("timed out after {} ms {}", options.request_timeout.count(), during));
    }
    if (ec.category() == bhttp::make_error_code(bhttp::error::end_of_stream).category() && ec != bhttp::error::end_of_stream &&
        ec != bhttp::error::partial_message) {
      return fail(r, ErrorKind::kProtocol, fmt::format("bad HTTP response: {}", ec.message()));
    }
    return fail(r, ErrorKind::kClosed, fmt::format("connection closed {} ({})", during, ec.message()));
  }

  // NOTE: a TLS connection is closed without close_notify: every response here is delimited by
  // HTTP framing, so a truncation cannot pass for an end, and waiting on the peer's reply to a
  // shutdown would only delay a close.
  void close() {
    beast::error_code ignored;
    beast::tcp_stream& s = tcp_layer();
    s.socket().shutdown(tcp::socket::shutdown_both, ignored);
    s.close();
    buffer.clear();
    connected = false;
  }

  net::awaitable<HttpResult<void>> connect(const HttpRequest& r);
  net::awaitable<HttpResult<void>> handshake(const HttpRequest& r);
  net::awaitable<HttpResult<HttpResponse>> exchange(const HttpRequest& r, const BodyFn& on_body,
                                                    Clock::time_point deadline, bool& got_response) {
    if (tls) co_return co_await exchange_on(*tls, r, on_body, deadline, got_response);
    co_return co_await exchange_on(plain, r, on_body, deadline, got_response);
  }
  template <typename Stream>
  net::awaitable<HttpResult<HttpResponse>> exchange_on(Stream& stream, const HttpRequest& r, const BodyFn& on_body,
                                                       Clock::time_point deadline, bool& got_response);
};

net::awaitable<HttpResult<void>> HttpConnection::Impl::connect(const HttpRequest& r) {
  auto [rec, endpoints] = co_await resolver.async_resolve(url.host, std::to_string(url.port), kTuple);
  if (rec || cancelled) {
    co_return std::unexpected(fail(r, ErrorKind::kConnect, fmt::format("cannot resolve '{}': {}", url.host, rec.message())));
  }
  if (url.tls) tls.emplace(executor, client_tls_context());
  beast::tcp_stream& stream = tcp_layer();
  stream.expires_after(options.connect_timeout);
  auto [ec, endpoint] = co_await stream.async_connect(endpoints, kTuple);
  if (ec == beast::error::timeout) {
    co_return std::unexpected(
        fail(r, ErrorKind::kTimeout, fmt::format("connecting timed out after {} ms", options.connect_timeout.count())));
  }
  if (ec || cancelled) {
    stream.close();
    co_return std::unexpected(fail(r, ErrorKind::kConnect, fmt::format("cannot connect: {}", ec.message())));
  }
  // Small writes (a request) and small reads (one token) matter more here than packet counts.
  beast::error_code ignored;
  stream.socket().set_option(tcp::no_delay(true), ignored);
  if (tls) {
    if (auto shaken = co_await handshake(r); !shaken) {
      close();
      co_return std::unexpected(std::move(shaken).error());
    }
  }
  connected = true;
  co_return HttpResult<void>();
}

// TLS: the server name sent (SNI) and checked against the certificate (RFC 6125 rules, by
// OpenSSL), within the connect timeout. A refused certificate is a kConnect error that says why.
net::awaitable<HttpResult<void>> HttpConnection::Impl::handshake(const HttpRequest& r) {
  boost::system::error_code not_an_address;
  net::ip::make_address(url.host, not_an_address);
  if (not_an_address && !SSL_set_tlsext_host_name(tls->native_handle(), url.host.c_str())) {
    co_return std::unexpected(fail(r, ErrorKind::kConnect, "TLS: cannot set the server name"));
  }
  tls->set_verify_callback(ssl::host_name_verification(url.host));
  beast::get_lowest_layer(*tls).expires_after(options.connect_timeout);
  auto [ec] = co_await tls->async_handshake(ssl::stream_base::client, kTuple);
  if (ec == beast::error::timeout) {
    co_return std::unexpected(fail(r, ErrorKind::kTimeout,
                                   fmt::format("TLS handshake timed out after {} ms", options.connect_timeout.count())));
  }
  if (ec || cancelled) {
    co_return std::unexpected(fail(r, ErrorKind::kConnect,
                                   fmt::format("TLS handshake failed: {}", tls_error(ec, tls->native_handle()))));
  }
  co_return HttpResult<void>();
}

template <typename Stream>
net::awaitable<HttpResult<HttpResponse>> HttpConnection::Impl::exchange_on(Stream& stream, const HttpRequest& r,
                                                                           const BodyFn& on_body,
                                                                           Clock::time_point deadline,
                                                                           bool& got_response) {
  bhttp::request<bhttp::string_body> req(bhttp::string_to_verb(r.method), r.target, 11);
  if (req.method() == bhttp::verb::unknown) req.method_string(r.method);
  req.set(bhttp::field::host, url.authority());
  req.set(bhttp::field::user_agent, options.user_agent);
  bool has_content_type = false;
  for (const Header& h : r.headers) {
    req.set(h.name, h.value);
    has_content_type = has_content_type || iequals(h.name, "content-type");
  }
  if (!r.body.empty() && !has_content_type) req.set(bhttp::field::content_type, "application/json");
  req.body() = r.body;
  req.keep_alive(true);
  req.prepare_payload();

  beast::get_lowest_layer(stream).expires_at(deadline);
  if (auto [ec, n] = co_await bhttp::async_write(stream, req, kTuple); ec || cancelled) {
    co_return std::unexpected(io_error(r, ec, "while sending the request"));
  }
  bhttp::response_parser<bhttp::buffer_body> parser;
  parser.body_limit(boost::none);  // streamed bodies have no limit; collected ones are checked below
  if (auto [ec, n] = co_await bhttp::async_read_header(stream, buffer, parser, kTuple); ec || cancelled) {
    got_response = buffer.size() > 0;
    co_return std::unexpected(io_error(r, ec, "before the response"));
  }
  got_response = true;
  HttpResponse response;
  response.status = static_cast<int>(parser.get().result_int());
  for (const auto& field : parser.get()) {
    response.headers.push_back({std::string(field.name_string()), std::string(field.value())});
  }
  const bool ok = response.status / 100 == 2;
  const bool collect = !ok || !on_body;
  std::array<char, 16384> chunk;
  while (!parser.is_done()) {
    parser.get().body().data = chunk.data();
    parser.get().body().size = chunk.size();
    // NOTE: read_some, not read: read would wait for the buffer to fill, and a streamed token
    // must reach the callback the moment it arrives.
    auto [ec, n] = co_await bhttp::async_read_some(stream, buffer, parser, kTuple);
    if (ec == bhttp::error::need_buffer) ec = {};
    const size_t got = chunk.size() - parser.get().body().size;
    if (got > 0 && !collect) on_body(std::string_view(chunk.data(), got));
    if (got > 0 && collect) {
      if (response.body.size() + got > options.max_collected_body) {
        close();
        co_return std::unexpected(fail(r, ErrorKind::kProtocol, fmt::format("response body larger than {} bytes",
                                                                            options.max_collected_body)));
      }
      response.body.append(chunk.data(), got);
    }
    if (ec || cancelled) {
      co_return std::unexpected(io_error(r, ec, fmt::format("in the middle of the response (HTTP {})", response.status)));
    }
  }
  if (!parser.keep_alive()) close();
  if (!ok) {
    HttpError e{ErrorKind::kStatus, response.status,
                fmt::format("{}: HTTP {}{}{}", what(r), response.status, response.body.empty() ? "" : ": ",
                            excerpt(response.body)),
                std::move(response.body)};
    co_return std::unexpected(std::move(e));
  }
  co_return response;
}

HttpConnection::HttpConnection(net::any_io_executor executor, Url url, HttpOptions options)
    : impl_(std::make_unique<Impl>(std::move(executor), std::move(url), std::move(options))) {}

HttpConnection::~HttpConnection() = default;

net::awaitable<HttpResult<HttpResponse>> HttpConnection::request(HttpRequest request, BodyFn on_body) {
  Impl& s = *impl_;
  s.cancelled = false;
  const Clock::time_point deadline = Clock::now() + s.options.request_timeout;
  for (int attempt = 0;; ++attempt) {
    const bool reused = s.connected;
    if (!s.connected) {
      auto connected = co_await s.connect(request);
      if (!connected) co_return std::unexpected(std::move(connected).error());
    }
    bool got_response = false;
    auto result = co_await s.exchange(request, on_body, deadline, got_response);
    if (!result) {
      const ErrorKind kind = result.error().kind;
      if (kind != ErrorKind::kStatus) s.close();  // the connection is in an unknown state
      if (kind == ErrorKind::kClosed && reused && !got_response && attempt == 0) continue;
    }
    co_return result;
  }
}

void HttpConnection::cancel() {
  impl_->cancelled = true;
  impl_->resolver.cancel();
  impl_->close();
}

bool HttpConnection::is_open() const { return impl_->connected; }
const Url& HttpConnection::url() const { return impl_->url; }

namespace {

net::awaitable<void> fetch_into(Url url, HttpRequest request, HttpOptions options, HttpResult<HttpResponse>* out) {
  HttpConnection connection(co_await net::this_coro::executor, std::move(url), std::move(options));
  *out = co_await connection.request(std::move(request));
}

}  // namespace

std::optional<ListedModel> first_listed_model(std::string_view body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("data") || !j["data"].is_array() || j["data"].empty()) {
    return std::nullopt;
  }
  const nlohmann::json& m = j["data"][0];
  if (!m.is_object() || !m.contains("id") || !m["id"].is_string()) return std::nullopt;
  ListedModel out{m["id"].get<std::string>(), {}};
  if (m.contains("system_fingerprint") && m["system_fingerprint"].is_string()) {
    out.system_fingerprint = m["system_fingerprint"].get<std::string>();
  }
  return out;
}

HttpResult<HttpResponse> fetch(const Url& url, HttpRequest request, const HttpOptions& options) {
  net::io_context io;
  HttpResult<HttpResponse> out = std::unexpected(HttpError{ErrorKind::kCancelled, 0, "not run", {}});
  net::co_spawn(io, fetch_into(url, std::move(request), options, &out), [](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  });
  io.run();
  return out;
}

}  // namespace sluice::http
