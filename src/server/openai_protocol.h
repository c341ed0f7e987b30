// The OpenAI HTTP API as sluice speaks it: request bodies parsed into typed, validated
// structs, and the error object every failure is reported with. Pure functions of their
// input (no engine, no sockets), so each rule here is tested directly (protocol_test.cc) and
// fuzzed (MutatedBodiesNeverCrash there).
//
// Parsing is strict about types, ranges and names: a field that would change the answer and
// is not implemented is refused with a 400 naming it (answering as if it had been applied
// would be worse), and so is a field this server does not know (as OpenAI's own API does).
// The fields that are accepted and ignored, because they do not change the answer, are one
// list (kIgnoredFields). Each error names the field ("param") and what was wrong with it.
//
// Beyond OpenAI's fields, vLLM's sampling extensions are accepted with the same meaning:
// top_k (0 or -1: off), min_p, repetition_penalty, ignore_eos, stop_token_ids, priority,
// chat_template_kwargs (extra variables for the chat template) and return_tokens_as_token_ids.
#pragma once

#include <cstdint>
#include <expected>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "engine/sampler.h"

namespace sluice::server {

using Json = nlohmann::ordered_json;  // request key order matters to chat templates (tool schemas)

// An API failure: the HTTP status and OpenAI's error object
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;     // empty: null
  std::string code;      // empty: null
  int retry_after = 0;   // seconds, sent as Retry-After when > 0 (429, 503)

  static ApiError invalid(std::string message, std::string param = {});
  static ApiError not_found(std::string message, std::string code = {});
  // OpenAI's shape for an unknown model: 404, invalid_request_error, code model_not_found.
  static ApiError model_not_found(std::string message);
  static ApiError unauthorized(std::string message);
  static ApiError too_large(std::string message);
  static ApiError overloaded(std::string message);
  static ApiError unavailable(std::string message);
  static ApiError internal(std::string message);

  std::string body() const;
};

template <typename T>
using ApiResult = std::expected<T, ApiError>;

// SLUICE_API_TRY(lhs, expr): evaluates expr (an ApiResult); on error returns it from the
// enclosing function, else moves the value into lhs (a declaration or an lvalue).
#define SLUICE_API_TRY(lhs, expr) SLUICE_API_TRY_IMPL_(SLUICE_CONCAT_(api_try_, __LINE__), lhs, expr)
#define SLUICE_API_TRY_IMPL_(tmp, lhs, expr)             \
  auto tmp = (expr);                                     \
  if (!tmp) return std::unexpected(std::move(tmp).error()); \
  lhs = std::move(*tmp)

// Parses a request body: a JSON object, or a 400 saying where the JSON is malformed.
ApiResult<Json> parse_body(std::string_view body);

// One prompt of /v1/completions: text, or token ids.
struct PromptInput {
  bool is_tokens = false;
  std::string text;
  std::vector<int32_t> tokens;
};

// What /v1/completions and /v1/chat/completions share.
struct GenerationParams {
  std::string model;                    // empty: the served model
  int32_t n = 1;                        // choices per prompt
  std::optional<int32_t> max_tokens;    // none: completions 16, chat up to the context
  const char* max_tokens_key = "max_tokens";  // the field it came from (chat: or max_completion_tokens)
  SamplingParams sampling;              // temperature defaults to 1, as OpenAI's
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool include_stop_str_in_output = false;
  int32_t min_tokens = 0;
  bool ignore_eos = false;
  bool stream = false;
  bool include_usage = false;           // stream_options.include_usage
  bool logprobs = false;                // report logprobs (sampling.top_logprobs alternatives)
  // Completions only: the prompt comes back before the completion, in the text and, with
  // logprobs, in the logprobs (each prompt token scored, the first null); max_tokens may be 0.
  bool echo = false;
  // vLLM's return_tokens_as_token_ids: logprobs name tokens "token_id:N", so a client can
  // map them back to ids whatever their text.
  bool tokens_as_ids = false;
  std::string user;
  int32_t priority = 0;
  // Predicted outputs: prediction {"type": "content", "content": text or text parts}; drafted
  // by the engine's speculative decoding (engine/spec/), never changing the output.
  std::optional<std::string> prediction;
  bool speculative = true;              // false: no speculative decoding for this request
  // response_format {"type": "json_object"}: the output is a JSON object (JSON mode).
  ResponseFormat response_format = ResponseFormat::kText;
};

struct CompletionRequest {
  GenerationParams params;
  std::vector<PromptInput> prompts;     // one or more
};

struct ChatRequest {
  GenerationParams params;
  Json messages;                        // validated; content parts flattened to strings
  Json tools;                           // null when absent, or when tool_choice is "none"
  Json template_kwargs;                 // chat_template_kwargs: an object, possibly empty
  bool add_generation_prompt = true;
};

struct TokenizeRequest {
  std::string model;
  bool is_chat = false;
  std::string prompt;                   // when !is_chat
  Json messages;                        // when is_chat
  Json tools;                           // chat: as in ChatRequest, so the count is the chat request's
  Json template_kwargs = Json::object();  // chat
  bool add_special_tokens = true;       // BOS where the vocabulary asks (text prompts)
  bool add_generation_prompt = true;    // chat
};

struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};

// Upper bounds on what one request may ask for.
inline constexpr int32_t kMaxChoices = 128;       // prompts x n
inline constexpr int32_t kMaxStopStrings = 16;
inline constexpr int32_t kMaxTopLogprobs = 20;

ApiResult<CompletionRequest> parse_completion_request(const Json& body);
ApiResult<ChatRequest> parse_chat_request(const Json& body);
ApiResult<TokenizeRequest> parse_tokenize_request(const Json& body);
ApiResult<DetokenizeRequest> parse_detokenize_request(const Json& body);

// A JSON value's type in OpenAI's words ("string", "integer", "array", ...), for messages.
std::string json_type_name(const Json& v);

// Fields accepted on every route and ignored, because they do not change the answer:
// OpenAI's bookkeeping (store, metadata, service_tier, prompt_cache_key, safety_identifier)
// and request ids. (Fields ignored at their default value only, such as
// skip_special_tokens: true, are checked where they are parsed.)
inline constexpr const char* kIgnoredFields[] = {"store", "metadata", "service_tier", "prompt_cache_key",
                                                 "safety_identifier", "request_id"};

}  // namespace sluice::server
