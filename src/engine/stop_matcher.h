// StopMatcher: finds stop strings in streamed text and decides what is safe to emit.
//
// Text arrives in pieces (one per decoded token). A stop string may span several pieces, so
// the matcher holds back the longest tail of the text that is a proper prefix of some stop
// string and releases everything before it. When a stop string completes, the text before it
// is emitted and nothing from the stop string on is ever emitted.
//
// Which stop string wins: the one that completes first (smallest end offset); among those
// ending at the same byte, the one that starts first (the longest). This is what a streaming
// generator observes, and it makes the output independent of how the text is split into
// pieces. Matching is byte-wise; because stop strings are valid UTF-8 and start on a lead
// byte, every cut the matcher makes falls on a character boundary, so `emit` is valid UTF-8
// whenever the pieces pushed so far are.
//
// Invariant: the held-back text is shorter than the longest stop string and contains no
// complete stop string.
//
// Thread-safety: belongs to one request; not thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

class StopMatcher {
 public:
  // Empty strings are ignored; with no stop strings every push is emitted at once.
  // include_stop: the matched stop string is emitted too (the text ends with it).
  explicit StopMatcher(std::vector<std::string> stop_strings, bool include_stop = false);

  struct Step {
    std::string emit;     // text now safe to show
    bool stopped = false;  // a stop string completed; generation should end
    std::string matched;   // the stop string that completed, when stopped
  };

  // Feeds newly decoded text. After a stop, returns an empty emit with stopped = true and the
  // same `matched`.
  Step push(std::string_view text);

  // End of generation without a stop: releases the held-back text. Empty after a stop.
  std::string flush();

  bool stopped() const { return stopped_; }
  // Bytes currently held back.
  size_t num_held() const { return held_.size(); }

 private:
  // Index in `text` where the longest tail that is a proper prefix of a stop string starts
  // (text.size() if there is none).
  size_t hold_start(std::string_view text) const;

  std::vector<std::string> stop_strings_;
  size_t max_stop_len_ = 0;
  bool include_stop_ = false;
  std::string held_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace sluice
