// StopMatcher implementation. Each push searches held-back text + new text; the held text
// is shorter than the longest stop string, so a push costs
// O((held + new) * num_stop_strings) for the search and O(max_len^2 * num_stop_strings) for
// the hold-back, both small for the handful of short stop strings requests use.
#include "engine/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace sluice {

StopMatcher::StopMatcher(std::vector<std::string> stop_strings, bool include_stop) : include_stop_(include_stop) {
  for (std::string& s : stop_strings) {
    if (s.empty()) continue;
    max_stop_len_ = std::max(max_stop_len_, s.size());
    stop_strings_.push_back(std::move(s));
  }
}

size_t StopMatcher::hold_start(std::string_view text) const {
  // Only a tail shorter than the longest stop string can be a proper prefix of one.
  const size_t earliest = text.size() >= max_stop_len_ ? text.size() - max_stop_len_ + 1 : 0;
  for (size_t i = earliest; i < text.size(); ++i) {
    const std::string_view tail = text.substr(i);
    for (const std::string& s : stop_strings_) {
      if (tail.size() < s.size() && s.starts_with(tail)) return i;
    }
  }
  return text.size();
}

StopMatcher::Step StopMatcher::push(std::string_view text) {
  Step step;
  if (stopped_) {
    step.stopped = true;
    step.matched = matched_;
    return step;
  }
  std::string buffer = std::move(held_);
  held_.clear();
  buffer.append(text);

  // The stop string that completes first; on equal ends, the one that starts first.
  size_t best_end = std::string::npos;
  size_t best_start = 0;
  const std::string* best = nullptr;
  for (const std::string& s : stop_strings_) {
    const size_t start = buffer.find(s);
    if (start == std::string::npos) continue;
    const size_t end = start + s.size();
    if (best == nullptr || end < best_end || (end == best_end && start < best_start)) {
      best_end = end;
      best_start = start;
      best = &s;
    }
  }
  if (best != nullptr) {
    stopped_ = true;
    matched_ = *best;
    buffer.resize(include_stop_ ? best_end : best_start);
    step.emit = std::move(buffer);
    step.stopped = true;
    step.matched = matched_;
    return step;
  }

  const size_t hold = hold_start(buffer);
  held_ = buffer.substr(hold);
  buffer.resize(hold);
  step.emit = std::move(buffer);
  return step;
}

std::string StopMatcher::flush() {
  if (stopped_) return {};
  return std::exchange(held_, {});
}

}  // namespace sluice
