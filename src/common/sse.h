// SseParser: turns the bytes of a text/event-stream body into events, as the HTML Living
// Standard's "server-sent events" section describes.
//
// Bytes arrive in arbitrary pieces (an event, a line, even a "\r\n" may be split between two
// reads), so the parser keeps the unfinished line and the event being built between calls.
// Lines end with "\n", "\r\n" or "\r". A line starting with ':' is a comment. "data" lines
// append to the event's data, joined with "\n"; an empty line dispatches the event. An event
// without any data line is not dispatched (the standard's rule), and an event cut off by the
// end of the stream is dropped: `has_partial_event()` tells a caller that it happened.
//
// Not thread-safe: one parser per stream.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace sluice::http {

struct SseEvent {
  std::string event;  // the "event:" field; empty means "message"
  std::string data;   // the "data:" lines joined with '\n'
  std::string id;     // the "id:" field of this event, if it had one
};

class SseParser {
 public:
  using EventFn = std::function<void(const SseEvent&)>;

  // Parses `bytes` and calls `on_event` for each event they complete, in order.
  void feed(std::string_view bytes, const EventFn& on_event);

  // True when bytes were fed that did not end an event (a line or an event left open).
  bool has_partial_event() const { return !line_.empty() || has_fields_; }

 private:
  void process_line(std::string_view line, const EventFn& on_event);

  std::string line_;       // the current line so far, without its terminator
  bool skip_lf_ = false;   // the last byte was '\r': a '\n' right after it ends nothing new
  bool has_fields_ = false;  // the event being built has had a field line
  bool has_data_ = false;
  SseEvent event_;
};

// The raw form, for a relay that passes events on as they came: where the first event in `s`
// from `at` ends (past the blank line that ends it), or npos. A CR last in `s` may be half of a
// CRLF: it waits, unless `final` (nothing more comes).
size_t sse_event_end(std::string_view s, size_t at, bool final = false);

}  // namespace sluice::http
