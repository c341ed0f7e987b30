// RequestHandle (engine.h): a caller's side of a request's stream.
#include "engine/engine.h"
#include "engine/engine_stream.h"

namespace sluice {

RequestHandle::RequestHandle(std::shared_ptr<StreamState> state, std::shared_ptr<Inbox> inbox)
    : state_(std::move(state)), inbox_(std::move(inbox)) {}
RequestHandle::RequestHandle(RequestHandle&&) noexcept = default;
RequestHandle& RequestHandle::operator=(RequestHandle&& other) noexcept {
  if (this != &other) {
    if (state_ && !state_->finished) inbox_->cancel(state_->id);
    state_ = std::move(other.state_);
    inbox_ = std::move(other.inbox_);
  }
  return *this;
}
RequestHandle::~RequestHandle() {
  if (state_ && !state_->finished) inbox_->cancel(state_->id);
}

uint64_t RequestHandle::id() const { return state_->id; }
void RequestHandle::cancel() { inbox_->cancel(state_->id); }

StreamOutput RequestHandle::next() {
  StreamState& s = *state_;
  MutexLock lock(s.mu);
  while (!s.readable()) s.cv.wait(lock);
  return s.take();
}

std::optional<StreamOutput> RequestHandle::next_for(std::chrono::milliseconds timeout) {
  StreamState& s = *state_;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  MutexLock lock(s.mu);
  while (!s.readable()) {
    if (!s.cv.wait_until(lock, deadline) && !s.readable()) return std::nullopt;
  }
  return s.take();
}

std::optional<StreamOutput> RequestHandle::try_next() {
  StreamState& s = *state_;
  MutexLock lock(s.mu);
  if (!s.readable()) return std::nullopt;
  return s.take();
}

void RequestHandle::on_output(std::function<void()> callback) {
  StreamState& s = *state_;
  bool ready = false;
  {
    MutexLock lock(s.mu);
    ready = s.readable();
    if (!s.final_read && !s.finished) s.notify = callback;
  }
  if (ready && callback) callback();
}

StreamOutput RequestHandle::wait() {
  StreamOutput all;
  for (;;) {
    StreamOutput o = next();
    all.prompt_logprobs.insert(all.prompt_logprobs.end(), o.prompt_logprobs.begin(), o.prompt_logprobs.end());
    all.tokens.insert(all.tokens.end(), o.tokens.begin(), o.tokens.end());
    all.text += o.text;
    if (o.finished) {
      o.prompt_logprobs = std::move(all.prompt_logprobs);
      o.tokens = std::move(all.tokens);
      o.text = std::move(all.text);
      return o;
    }
  }
}

}  // namespace sluice
