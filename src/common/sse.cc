#include "common/sse.h"

namespace sluice::http {

void SseParser::feed(std::string_view bytes, const EventFn& on_event) {
  size_t i = 0;
  if (skip_lf_ && !bytes.empty()) {
    skip_lf_ = false;
    if (bytes[0] == '\n') i = 1;
  }
  while (i < bytes.size()) {
    const size_t end = bytes.find_first_of("\r\n", i);
    if (end == std::string_view::npos) {
      line_.append(bytes.substr(i));
      return;
    }
    // NOTE: most events are whole in one read, so the line is passed from `bytes` directly and
    // only a line split between reads is copied.
    if (line_.empty()) {
      process_line(bytes.substr(i, end - i), on_event);
    } else {
      line_.append(bytes.substr(i, end - i));
      std::string line = std::move(line_);
      line_.clear();
      process_line(line, on_event);
    }
    i = end + 1;
    if (bytes[end] == '\r') {
      if (i == bytes.size()) {
        skip_lf_ = true;
      } else if (bytes[i] == '\n') {
        ++i;
      }
    }
  }
}

void SseParser::process_line(std::string_view line, const EventFn& on_event) {
  if (line.empty()) {
    if (has_data_) on_event(event_);
    event_ = SseEvent();
    has_fields_ = has_data_ = false;
    return;
  }
  if (line.front() == ':') return;  // a comment, often a keep-alive
  has_fields_ = true;
  const size_t colon = line.find(':');
  std::string_view field = line.substr(0, colon);
  std::string_view value;
  if (colon != std::string_view::npos) {
    value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_) event_.data += '\n';
    event_.data.append(value);
    has_data_ = true;
  } else if (field == "event") {
    event_.event = value;
  } else if (field == "id") {
    event_.id = value;
  }
  // "retry" and unknown fields are ignored: a client that never reconnects has no use for them.
}

size_t sse_event_end(std::string_view s, size_t at, bool final) {
  constexpr size_t npos = std::string_view::npos;
  // The end of the line terminator at `i`, or npos when it cannot be told yet.
  auto terminator_end = [&](size_t i) -> size_t {
    if (s[i] == '\n') return i + 1;
    if (i + 1 == s.size()) return final ? i + 1 : npos;
    return s[i + 1] == '\n' ? i + 2 : i + 1;
  };
  for (size_t i = s.find_first_of("\r\n", at); i != npos; i = s.find_first_of("\r\n", i)) {
    const size_t next = terminator_end(i);
    if (next == npos || next == s.size()) return npos;
    if (s[next] == '\n' || s[next] == '\r') return terminator_end(next);  // a blank line
    i = next;
  }
  return npos;
}

}  // namespace sluice::http
