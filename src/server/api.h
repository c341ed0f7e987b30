// OpenAiApi: the OpenAI API over one engine. Turns parsed requests (openai_protocol.h) into
// engine Requests, and engine output into response bodies and server-sent events. It knows
// nothing of sockets: the HTTP layer (http_server.h) moves bytes, this decides what they say,
// so every response shape is tested here without a network (api_test.cc).
//
// A generation request becomes one engine request per choice (prompts x n). Its Generation
// reads their streams without blocking (poll), so an event loop can drive many at once:
// on_output() says when to poll again.
//
// Decisions:
//   - max_tokens defaults to 16 for completions (as OpenAI) and to the rest of the context for
//     chat; a prompt that fills the context, or prompt + an explicit max_tokens over it, is a
//     400 that names both numbers and the limit.
//   - n > 1 with a seed: choice i samples with seed + i, so choice 0 equals the n = 1 answer.
//   - Chat prompts are the model's template rendered with messages, tools (null if none),
//     documents (null), add_generation_prompt, bos_token, eos_token, then chat_template_kwargs,
//     and tokenized with special tokens parsed and no BOS added (the template has its own).
//   - usage.prompt_tokens counts each prompt once, however many choices it has;
//     prompt_tokens_details.cached_tokens is what the prefix cache served of them.
//   - Text is valid UTF-8 on the wire: invalid bytes (random-weight models make them) are
//     sent as U+FFFD; logprob tokens carry their raw "bytes" too.
//
// Thread-safety: OpenAiApi is immutable after construction and may be used from many threads;
// a Generation belongs to one thread at a time (the connection that drives it).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_template.h"
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
};

class OpenAiApi {
 public:
  OpenAiApi(Engine& engine, const Tokenizer& tokenizer, chat::ChatTemplate chat_template, ApiConfig config);

  const ApiConfig& config() const { return config_; }
  Engine& engine() const { return engine_; }

  Json models() const;
  // GET /v1/models/{id}: the model object, or 404 model_not_found.
  ApiResult<Json> model(const std::string& id) const;
  ApiResult<Json> tokenize(const Json& body) const;
  ApiResult<Json> detokenize(const Json& body) const;
  // Validates, tokenizes and submits. Errors: 400 (invalid), 404 (unknown model), 429
  // (queue full), 503 (shutting down).
  ApiResult<std::unique_ptr<Generation>> start_completion(const Json& body) const;
  ApiResult<std::unique_ptr<Generation>> start_chat(const Json& body) const;

  // The chat prompt for `messages` (exposed for /tokenize and tests).
  ApiResult<std::string> render_chat(const Json& messages, const Json& tools, const Json& kwargs,
                                     bool add_generation_prompt) const;

 private:
  ApiResult<bool> check_model(const std::string& model) const;
  // `param`: the field an error names ("prompt", "messages"); `continues`: the text goes on
  // from the prompt (a prediction), so no SPM space in front.
  ApiResult<std::vector<int32_t>> encode(const PromptInput& prompt, bool add_bos, bool parse_special,
                                         const char* param, bool continues = false) const;
  ApiResult<std::unique_ptr<Generation>> submit(Generation::Kind kind, const GenerationParams& params,
                                                std::vector<std::vector<int32_t>> prompts,
                                                std::vector<std::string> echo_texts = {},
                                                std::vector<bool> echo_from_text = {}) const;

  Engine& engine_;
  const Tokenizer& tokenizer_;
  chat::ChatTemplate chat_template_;
  ApiConfig config_;
};

// The request field an engine refusal is about, from the field its message starts with (the
// engine's checks name it first: Engine::validate, SamplingParams::validate), so a client gets
// OpenAI's `param` rather than null. `prompt_key`: "prompt" or "messages"; "" when none matches.
std::string engine_error_param(std::string_view message, std::string_view prompt_key, bool completion);

}  // namespace sluice::server
