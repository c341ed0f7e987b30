// OpenAiApi: the OpenAI API over one engine. Turns parsed requests (openai_protocol.h) into
// engine Requests, one per choice (prompts x n), and hands them to a Generation
// (generation.h), which turns their output into response bodies and server-sent events. It
// knows nothing of sockets: the HTTP layer (http_server.h) moves bytes, this decides what they
// say.
//
// Decisions:
//   - max_tokens defaults to 16 for completions (as OpenAI) and to the rest of the context for
//     chat; a prompt that fills the context, or prompt + an explicit max_tokens over it, is a
//     400 that names both numbers and the limit.
//   - n > 1 with a seed: choice i samples with seed + i, so choice 0 equals the n = 1 answer.
//   - Chat prompts are the model's template rendered with messages, tools (null if none),
//     documents (null), add_generation_prompt, bos_token, eos_token, then chat_template_kwargs,
//     and tokenized with special tokens parsed and no BOS added (the template has its own).
//   - All choices or none: an engine refusal of one (the queue full) submits nothing.
//
// Thread-safety: OpenAiApi is immutable after construction and may be used from many threads.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_template.h"
#include "chat/message_forms.h"
#include "engine/engine.h"
#include "server/generation.h"
#include "server/openai_protocol.h"
#include "tokenizer/tokenizer.h"

namespace sluice::server {

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
  chat::MessageForms message_forms_;  // probed once from chat_template_
  ApiConfig config_;
};

// The request field an engine refusal is about, from the field its message starts with (the
// engine's checks name it first: Engine::validate, SamplingParams::validate), so a client gets
// OpenAI's `param` rather than null. `prompt_key`: "prompt" or "messages"; "" when none matches.
std::string engine_error_param(std::string_view message, std::string_view prompt_key, bool completion);

}  // namespace sluice::server
