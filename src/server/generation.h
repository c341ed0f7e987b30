// Generation: what one OpenAI generation request's engine requests produce, as response bodies
// and server-sent events. OpenAiApi (api.h) validates a request, submits one engine request per
// choice (prompts x n) and hands them to a Generation; the connection that serves the request
// polls it without blocking (poll), so an event loop can drive many at once: on_output() says
// when to poll again.
//
// Decisions:
//   - Text is valid UTF-8 on the wire: invalid bytes (random-weight models make them) are
//     sent as U+FFFD; logprob tokens carry their raw "bytes" too.
//   - Completions' text_offset counts bytes: of the text returned for generated tokens (U+FFFD
//     counts three), of the tokens' raw pieces for an echoed prompt.
//   - usage.prompt_tokens counts each prompt once, however many choices it has;
//     prompt_tokens_details.cached_tokens is what the prefix cache served of them.
//   - Every chunk of a stream carries the same id and "created" (when the request came).
//
// Thread-safety: a Generation belongs to one thread at a time (the connection that drives it).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/openai_protocol.h"
#include "tokenizer/tokenizer.h"

namespace sluice::server {

struct ApiConfig {
  std::string model_name = "sluice";    // what /v1/models lists and requests must name
  std::string system_fingerprint;       // changes with the model file and the engine config
  int64_t created = 0;                  // unix seconds (model "created", start of serving)
  std::function<std::chrono::system_clock::time_point()> now;  // default: system_clock::now
};

class Generation {
 public:
  enum class Kind { kCompletion, kChat };
  struct Choice;

  ~Generation();
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  bool streaming() const { return stream_; }
  // Reads whatever the engine has produced, without blocking. When streaming, appends the
  // server-sent events for it to `events` ("data: {...}\n\n", ending with "data: [DONE]\n\n").
  // Returns true once every choice has finished (then the response is complete).
  bool poll(std::string& events);
  // After poll() returned true, for non-streaming requests: the response body, or the error
  // (500 if the engine failed, 503 if it shut down first).
  ApiResult<std::string> response();
  // Calls `callback` whenever any choice has new output (see RequestHandle::on_output).
  void on_output(const std::function<void()>& callback);
  // Cancels every unfinished choice (the client went away); their blocks are freed.
  void cancel();
  int32_t num_choices() const { return static_cast<int32_t>(choices_.size()); }

 private:
  friend class OpenAiApi;
  Generation(Kind kind, const Tokenizer& tokenizer, const ApiConfig& config);
  void emit_text(Choice& c, const StreamOutput& out, std::string& events);
  void emit_finish(Choice& c, std::string& events);
  std::string chunk(Json choices) const;
  Json usage() const;
  Json logprobs_json(Choice& c, const std::vector<TokenOutput>& tokens) const;
  // Legacy completions' top_logprobs of one token: its alternatives and the token itself.
  Json legacy_top(const TokenOutput& t) const;
  // The next choice: engine request `handle`, for prompt `prompt_index` (OpenAiApi::submit).
  void add_choice(int32_t prompt_index, RequestHandle handle);
  // Echo with logprobs: the prompt's tokens as legacy completions logprobs, the first one's
  // logprob null (nothing comes before it); text offsets index the echoed text.
  Json prompt_logprobs_json(Choice& c) const;
  // A token as logprobs name it: its text ("bytes:\xNN..." where that is not valid UTF-8), or
  // "token_id:N" (return_tokens_as_token_ids).
  std::string token_name(int32_t id) const;
  // Streaming echo: the prompt's chunk, once its logprobs (if asked for) are all there.
  void emit_echo(Choice& c, bool finished, std::string& events);

  Kind kind_;
  const Tokenizer& tokenizer_;
  const ApiConfig& config_;
  std::string id_;
  int64_t created_ = 0;  // when the request came: the same in every chunk (OpenAI's rule)
  std::string model_;
  bool stream_ = false;
  bool include_usage_ = false;
  bool logprobs_ = false;
  bool echo_ = false;
  bool tokens_as_ids_ = false;
  std::vector<std::string> echo_texts_;               // per prompt, with echo
  std::vector<bool> echo_from_text_;                  // per prompt, with echo: sent as text
  std::vector<std::vector<int32_t>> echo_prompts_;    // per prompt, with echo and logprobs
  std::vector<int32_t> prompt_lengths_;  // per prompt
  std::vector<int32_t> prediction_;      // the prediction's tokens (predicted outputs)
  std::vector<std::unique_ptr<Choice>> choices_;
  bool done_ = false;
  // The error events a stream has carried: each one once (OpenAI's error events name no choice,
  // so n choices cut short by a shutdown make one event, not n alike ones; another error, an
  // engine failure beside them, still has its own).
  std::vector<std::string> error_events_sent_;
};

}  // namespace sluice::server
