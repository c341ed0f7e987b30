// The engine's streams and inbox (engine.h): the only state caller threads share with the
// engine thread. Internal to the engine library: engine.cc, engine_output.cc and
// engine_stream.cc.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "engine/request.h"

namespace sluice {

struct StreamState {
  explicit StreamState(uint64_t request_id) : id(request_id) {}
  const uint64_t id;
  Mutex mu;
  CondVar cv;
  StreamOutput pending SLUICE_GUARDED_BY(mu);      // output not yet read
  bool has_pending SLUICE_GUARDED_BY(mu) = false;
  bool final_read SLUICE_GUARDED_BY(mu) = false;   // the finished output was handed out
  StreamOutput final_copy SLUICE_GUARDED_BY(mu);   // finish fields, repeated after the end
  std::atomic<bool> finished{false};               // the engine pushed the finished output
  std::function<void()> notify SLUICE_GUARDED_BY(mu);  // RequestHandle::on_output

  // Engine thread: appends output and wakes the reader.
  void push(const std::vector<TokenOutput>& tokens, const std::string& text, const StreamOutput* final,
            const std::vector<TokenOutput>& prompt_logprobs = {}) {
    std::function<void()> callback;
    {
      MutexLock lock(mu);
      callback = notify;
      if (final) notify = nullptr;  // nothing follows; drop what the callback holds
      pending.prompt_logprobs.insert(pending.prompt_logprobs.end(), prompt_logprobs.begin(), prompt_logprobs.end());
      pending.tokens.insert(pending.tokens.end(), tokens.begin(), tokens.end());
      pending.text += text;
      if (final) {
        pending.finished = true;
        pending.finish_reason = final->finish_reason;
        pending.stop_matched = final->stop_matched;
        pending.error = final->error;
        pending.metrics = final->metrics;
        final_copy = pending;
        final_copy.prompt_logprobs.clear();
        final_copy.tokens.clear();
        final_copy.text.clear();
        finished = true;
      }
      has_pending = true;
    }
    cv.notify_all();
    if (callback) callback();
  }

  bool readable() const SLUICE_REQUIRES(mu) { return has_pending || final_read; }

  // REQUIRES: readable().
  StreamOutput take() SLUICE_REQUIRES(mu) {
    if (!has_pending) return final_copy;
    StreamOutput out = std::move(pending);
    pending = StreamOutput{};
    has_pending = false;
    if (out.finished) final_read = true;
    return out;
  }
};

struct Command {
  enum Kind { kSubmit, kCancel } kind;
  std::shared_ptr<StreamState> stream;  // kSubmit
  Request request;                      // kSubmit
  double submit_time = 0;               // kSubmit
  uint64_t request_id = 0;              // kCancel
};

struct Inbox {
  Mutex mu;
  CondVar cv;
  std::deque<Command> commands SLUICE_GUARDED_BY(mu);
  int32_t num_submits SLUICE_GUARDED_BY(mu) = 0;  // kSubmit commands in `commands`
  int32_t num_waiting SLUICE_GUARDED_BY(mu) = 0;  // scheduler's waiting count, after the last step
  bool closed SLUICE_GUARDED_BY(mu) = false;

  void cancel(uint64_t request_id) {
    {
      MutexLock lock(mu);
      if (closed) return;
      commands.push_back({Command::kCancel, nullptr, {}, 0, request_id});
    }
    cv.notify_all();
  }
};

}  // namespace sluice
