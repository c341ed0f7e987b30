// One HTTP connection, answering: responses, streaming a Generation's output, probing
// half-closed clients, bounded writing and the lingering close (http_session.h).
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <iostream>

#include <fmt/format.h>

#include "server/http_session.h"

namespace sluice::server {
namespace {

// A chunk of the chunked transfer coding (RFC 9112 section 7.1).
std::string chunk_frame(std::string_view data) { return fmt::format("{:x}\r\n{}\r\n", data.size(), data); }

}  // namespace

std::string Session::head(int status, std::string_view content_type, std::string_view extra) {
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

void Session::respond(int status, std::string_view content_type, std::string body, std::string extra_headers) {
  server_.count_response(std::string(route_), status);
  std::string bytes = head(status, content_type, extra_headers);
  if (status != 204) bytes += fmt::format("Content-Length: {}\r\n", body.size());
  bytes += "\r\n";
  if (!head_only_ && status != 204) bytes += body;
  response_done_ = true;
  queue(std::move(bytes));
}

void Session::respond_error(const ApiError& e) {
  std::string extra = e.retry_after > 0 ? fmt::format("Retry-After: {}\r\n", e.retry_after) : std::string();
  if (e.status == 401) extra += "WWW-Authenticate: Bearer\r\n";  // RFC 9110 section 11.6.1
  respond(e.status, "application/json", e.body(), extra);
}

void Session::start_generation(ApiResult<std::unique_ptr<Generation>> g) {
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

void Session::on_engine_output() {
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

std::string Session::frame(std::string_view data) const { return http10_ ? std::string(data) : chunk_frame(data); }

void Session::end_generation() {
  gen_.reset();
  probe_timer_.cancel();
  // Released after the caller returns (it may still use the session).
  if (generating_) net::post(stream_.get_executor(), [keep = std::move(generating_)] {});
}

void Session::watch_disconnect() {
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

void Session::on_peer_eof() {
  peer_eof_ = true;  // what it sent before is still answered (after_response)
  probe(std::chrono::milliseconds(50));
}

void Session::probe(Clock::duration next) {
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

void Session::client_gone() {
  if (gen_) {
    server_.count_disconnect();  // before the cancel: whoever sees the engine idle sees the count
    gen_->cancel();
    end_generation();
  }
  close();
}

void Session::queue(std::string bytes) {
  if (closed_) return;
  queued_bytes_ += bytes.size();
  server_.buffered_bytes += static_cast<int64_t>(bytes.size());
  queue_.push_back(std::move(bytes));
  if (!writing_) do_write();
}

void Session::do_write() {
  if (closed_) return;
  if (queue_.empty()) {
    writing_ = false;
    if (response_done_ && !gen_) after_response();
    return;
  }
  writing_ = true;
  // A slice at a time, each with its own deadline: the write timeout is for a client that takes
  // nothing, not for a large answer (a non-streamed one is one item) that a client reads slowly.
  constexpr size_t kSlice = 64 << 10;
  const std::string& front = queue_.front();
  const size_t n = std::min(kSlice, front.size() - front_written_);
  stream_.expires_after(write_timeout());
  net::async_write(stream_, net::buffer(front.data() + front_written_, n),
                   [self = shared_from_this(), n](beast::error_code ec, size_t) {
                     if (self->closed_) return;
                     if (ec == beast::error::timeout) {
                       // Counted as this, not as a disconnect: close() cancels what still runs.
                       self->server_.count_write_timeout();
                       return self->close();
                     }
                     if (ec) return self->client_gone();
                     self->front_written_ += n;
                     if (self->front_written_ == self->queue_.front().size()) {
                       self->front_written_ = 0;
                       self->unqueue_front();
                     }
                     self->do_write();
                   });
}

void Session::unqueue_front() {
  queued_bytes_ -= queue_.front().size();
  server_.buffered_bytes -= static_cast<int64_t>(queue_.front().size());
  queue_.pop_front();
}

void Session::after_response() {
  response_done_ = false;
  head_only_ = false;
  end_request();
  if (close_after_ || server_.draining) return linger();
  // A half-closed client sends nothing more; requests it pipelined before are answered.
  if (peer_eof_ && buffer_.size() == 0) return linger();
  do_read();
}

void Session::linger() {
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  if (ec) return close();
  stream_.expires_after(std::chrono::seconds(1));  // a deadline for the whole drain
  linger_read(std::make_shared<std::array<char, 16384>>());
}

void Session::linger_read(std::shared_ptr<std::array<char, 16384>> scratch) {
  stream_.async_read_some(net::buffer(*scratch), [self = shared_from_this(), scratch](beast::error_code rec, size_t n) {
    if (rec) return self->close();
    self->lingered_ += n;
    if (self->lingered_ > (64u << 20)) return self->close();
    self->linger_read(scratch);
  });
}

void Session::close() {
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

}  // namespace sluice::server
