#include "server/openai_protocol.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "common/json.h"
#include "server/chat_messages.h"
#include "server/request_checks.h"
#include "server/request_fields.h"

namespace sluice::server {

// ---- errors ----

ApiError ApiError::invalid(std::string message, std::string param) {
  return {.status = 400, .message = std::move(message), .param = std::move(param)};
}
ApiError ApiError::not_found(std::string message, std::string code) {
  return {.status = 404, .message = std::move(message), .type = "invalid_request_error", .code = std::move(code)};
}
ApiError ApiError::model_not_found(std::string message) {
  return {.status = 404, .message = std::move(message), .param = "model", .code = "model_not_found"};
}
ApiError ApiError::unauthorized(std::string message) {
  return {.status = 401, .message = std::move(message), .type = "invalid_request_error", .code = "invalid_api_key"};
}
ApiError ApiError::too_large(std::string message) {
  return {.status = 413, .message = std::move(message), .type = "invalid_request_error", .code = "request_too_large"};
}
ApiError ApiError::overloaded(std::string message) {
  return {.status = 429, .message = std::move(message), .type = "rate_limit_error", .code = "overloaded",
          .retry_after = 1};
}
ApiError ApiError::unavailable(std::string message) {
  return {.status = 503, .message = std::move(message), .type = "server_error", .code = "unavailable",
          .retry_after = 5};
}
ApiError ApiError::internal(std::string message) {
  return {.status = 500, .message = std::move(message), .type = "server_error"};
}

std::string ApiError::body() const {
  Json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return Json{{"error", e}}.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string json_type_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "integer";
    case Json::value_t::number_float: return "number";
    case Json::value_t::string: return "string";
    case Json::value_t::array: return "array";
    case Json::value_t::object: return "object";
    default: return "unknown";
  }
}

ApiResult<Json> parse_body(std::string_view body) {
  if (body.empty()) return std::unexpected(ApiError::invalid("the request body is empty; send a JSON object"));
  auto j = parse_json(body, {.reject_duplicate_keys = true});
  if (!j && j.error().duplicate_key) {
    // Valid JSON, but a proxy that reads the first value and this server the last would see
    // two requests in one.
    return std::unexpected(ApiError::invalid(
        fmt::format("the request body is ambiguous: {} (send each key once)", j.error().message)));
  }
  if (!j) {
    return std::unexpected(ApiError::invalid(
        j.error().byte > 0 ? fmt::format("the request body is not valid JSON (at byte {}): {}", j.error().byte,
                                         j.error().message)
                           : fmt::format("the request body is not valid JSON: {}", j.error().message)));
  }
  if (!j->is_object()) {
    return std::unexpected(ApiError::invalid(fmt::format("the request body must be a JSON object, got {}", json_type_name(*j))));
  }
  return std::move(*j);
}

namespace {

// response_format: {"type": "text"} or {"type": "json_object"} (JSON mode: engine/json_constraint.h).
// json_schema (structured outputs) is refused: a schema the output would not follow is worse
// than a clear error.
ApiResult<ResponseFormat> parse_response_format(const Json& body) {
  const Json* v = field(body, "response_format");
  if (!v) return ResponseFormat::kText;
  const Json* type = v->is_object() ? field(*v, "type") : nullptr;
  if (!type || !type->is_string()) {
    return std::unexpected(ApiError::invalid(
        "'response_format' must be an object {\"type\": \"text\"} or {\"type\": \"json_object\"}", "response_format"));
  }
  if (*type == "json_schema") {
    return std::unexpected(ApiError::invalid(
        "'response_format' json_schema is not supported (structured outputs that follow a schema); "
        "{\"type\": \"json_object\"} gives a JSON object of any shape",
        "response_format"));
  }
  if (*type != "text" && *type != "json_object") {
    return std::unexpected(ApiError::invalid(
        fmt::format("unknown 'response_format' type {}: text or json_object", type->dump()), "response_format"));
  }
  for (auto it = v->begin(); it != v->end(); ++it) {
    if (it.key() != "type" && !it->is_null()) {
      return std::unexpected(ApiError::invalid(
          fmt::format("unknown field 'response_format.{}' for type {}", it.key(), type->dump()), "response_format"));
    }
  }
  return *type == "json_object" ? ResponseFormat::kJsonObject : ResponseFormat::kText;
}

// max_tokens (chat: or its newer name max_completion_tokens; both at once must agree), echo,
// min_tokens and include_stop_str_in_output.
ApiResult<bool> parse_lengths(const Json& body, bool chat, GenerationParams& p) {
  const bool completion_key = chat && field(body, "max_completion_tokens");
  if (completion_key) p.max_tokens_key = "max_completion_tokens";
  if (!chat) {
    SLUICE_API_TRY(auto echo, get_bool(body, "echo"));
    p.echo = echo.value_or(false);
  }
  // max_tokens 0 scores the prompt without generating (echo: true, the legacy API's way).
  const int64_t min_max_tokens = p.echo ? 0 : 1, max_max_tokens = std::numeric_limits<int32_t>::max();
  if (const Json* v = field(body, p.max_tokens_key); v && !chat && !p.echo && is_integral(*v) && v->get<double>() == 0) {
    return std::unexpected(ApiError::invalid(
        fmt::format("'{}' must be in [1, {}], got 0 (0, which scores the prompt and generates nothing, needs "
                    "\"echo\": true)",
                    p.max_tokens_key, max_max_tokens),
        p.max_tokens_key));
  }
  SLUICE_API_TRY(auto max_tokens, get_int(body, p.max_tokens_key, min_max_tokens, max_max_tokens));
  if (max_tokens) p.max_tokens = static_cast<int32_t>(*max_tokens);
  if (completion_key) {
    SLUICE_API_TRY(auto legacy, get_int(body, "max_tokens", min_max_tokens, max_max_tokens));
    if (legacy && *legacy != *max_tokens) {
      return std::unexpected(ApiError::invalid(
          fmt::format("'max_tokens' ({}) and 'max_completion_tokens' ({}) differ; send one of them", *legacy,
                      *max_tokens),
          "max_tokens"));
    }
  }
  SLUICE_API_TRY(auto min_tokens, get_int(body, "min_tokens", 0, std::numeric_limits<int32_t>::max()));
  p.min_tokens = static_cast<int32_t>(min_tokens.value_or(0));
  if (p.max_tokens && p.min_tokens > *p.max_tokens) {
    return std::unexpected(ApiError::invalid(
        fmt::format("'min_tokens' ({}) must not exceed '{}' ({})", p.min_tokens, p.max_tokens_key, *p.max_tokens), "min_tokens"));
  }
  SLUICE_API_TRY(auto include_stop, get_bool(body, "include_stop_str_in_output"));
  p.include_stop_str_in_output = include_stop.value_or(false);
  return true;
}

ApiResult<SamplingParams> parse_sampling(const Json& body) {
  SamplingParams s;
  SLUICE_API_TRY(auto temperature, get_number_in(body, "temperature", 0, 2));
  s.temperature = static_cast<float>(temperature.value_or(1.0));
  SLUICE_API_TRY(auto top_p, get_number_in(body, "top_p", 0, 1, /*min_open=*/true));
  s.top_p = static_cast<float>(top_p.value_or(1.0));
  SLUICE_API_TRY(auto top_k, get_int(body, "top_k", -1, std::numeric_limits<int32_t>::max()));
  s.top_k = static_cast<int32_t>(std::max<int64_t>(0, top_k.value_or(0)));
  SLUICE_API_TRY(auto min_p, get_number_in(body, "min_p", 0, 1));
  s.min_p = static_cast<float>(min_p.value_or(0.0));
  SLUICE_API_TRY(auto presence, get_number_in(body, "presence_penalty", -2, 2));
  s.presence_penalty = static_cast<float>(presence.value_or(0.0));
  SLUICE_API_TRY(auto frequency, get_number_in(body, "frequency_penalty", -2, 2));
  s.frequency_penalty = static_cast<float>(frequency.value_or(0.0));
  SLUICE_API_TRY(auto repetition, get_number_in(body, "repetition_penalty", 0, 100, /*min_open=*/true));
  s.repetition_penalty = static_cast<float>(repetition.value_or(1.0));
  return s;
}

// -1 means "no seed" (a fresh one per request), as llama.cpp's. Every other integer is a seed
// (OpenAI takes any int64; a negative one is its two's-complement bits).
ApiResult<std::optional<uint64_t>> parse_seed(const Json& body) {
  const Json* seed = field(body, "seed");
  if (!seed) return std::nullopt;
  if (!is_integral(*seed)) return std::unexpected(wrong_type("seed", "an integer", *seed));
  if (seed->is_number_unsigned()) return seed->get<uint64_t>();
  if (seed->is_number_integer()) {
    const int64_t v = seed->get<int64_t>();
    return v == -1 ? std::nullopt : std::optional<uint64_t>(static_cast<uint64_t>(v));
  }
  const double d = seed->get<double>();
  if (d >= 0x1p64 || d <= -0x1p63) {
    // (An integer below -2^63 arrives as a float rounded to -2^63; -2^63 itself arrives as an
    // integer.)
    return std::unexpected(ApiError::invalid(
        fmt::format("'seed' must be in [{}, {}], got {}", INT64_MIN, UINT64_MAX, seed->dump()), "seed"));
  }
  if (d >= 0) return static_cast<uint64_t>(d);
  if (d == -1) return std::nullopt;
  return static_cast<uint64_t>(static_cast<int64_t>(d));
}

// stop (a string or up to kMaxStopStrings of them, none empty), stop_token_ids and ignore_eos.
ApiResult<bool> parse_stops(const Json& body, GenerationParams& p) {
  if (const Json* stop = field(body, "stop")) {
    if (stop->is_string()) {
      p.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const Json& s : *stop) {
        if (!s.is_string()) return std::unexpected(wrong_type("stop", "a string or an array of strings", s));
        p.stop.push_back(s.get<std::string>());
      }
    } else {
      return std::unexpected(wrong_type("stop", "a string or an array of strings", *stop));
    }
    if (p.stop.size() > static_cast<size_t>(kMaxStopStrings)) {
      return std::unexpected(
          ApiError::invalid(fmt::format("'stop' may hold at most {} strings, got {}", kMaxStopStrings, p.stop.size()), "stop"));
    }
    for (const auto& s : p.stop) {
      if (s.empty()) return std::unexpected(ApiError::invalid("'stop' strings must not be empty", "stop"));
    }
  }
  if (const Json* ids = field(body, "stop_token_ids")) {
    if (!ids->is_array()) return std::unexpected(wrong_type("stop_token_ids", "an array of integers", *ids));
    SLUICE_API_TRY(p.stop_token_ids, token_array(*ids, "stop_token_ids"));
  }
  SLUICE_API_TRY(auto ignore_eos, get_bool(body, "ignore_eos"));
  p.ignore_eos = ignore_eos.value_or(false);
  return true;
}

// stream, and stream_options (only with stream; include_usage its one field).
ApiResult<bool> parse_stream(const Json& body, GenerationParams& p) {
  SLUICE_API_TRY(auto stream, get_bool(body, "stream"));
  p.stream = stream.value_or(false);
  const Json* so = field(body, "stream_options");
  if (!so) return true;
  if (!so->is_object()) return std::unexpected(wrong_type("stream_options", "an object", *so));
  if (!p.stream) {
    return std::unexpected(ApiError::invalid("'stream_options' is only allowed when 'stream' is true", "stream_options"));
  }
  SLUICE_API_TRY(auto include_usage, get_bool(*so, "include_usage"));
  p.include_usage = include_usage.value_or(false);
  for (auto it = so->begin(); it != so->end(); ++it) {
    if (it.key() != "include_usage" && !it->is_null()) {
      return std::unexpected(ApiError::invalid(
          fmt::format("unknown field 'stream_options.{}'", it.key().substr(0, 100)), "stream_options"));
    }
  }
  return true;
}

// Chat: logprobs (a boolean) and top_logprobs; legacy completions: logprobs is the number of
// alternatives (0: the chosen token only).
ApiResult<bool> parse_logprobs(const Json& body, bool chat, GenerationParams& p) {
  if (!chat) {
    SLUICE_API_TRY(auto logprobs, get_int(body, "logprobs", 0, kMaxTopLogprobs));
    p.logprobs = logprobs.has_value();
    p.sampling.top_logprobs = static_cast<int32_t>(logprobs.value_or(0));
    return true;
  }
  SLUICE_API_TRY(auto logprobs, get_bool(body, "logprobs"));
  p.logprobs = logprobs.value_or(false);
  SLUICE_API_TRY(auto top, get_int(body, "top_logprobs", 0, kMaxTopLogprobs));
  if (top && !p.logprobs && *top > 0) {
    return std::unexpected(ApiError::invalid("'top_logprobs' needs 'logprobs' set to true", "top_logprobs"));
  }
  p.sampling.top_logprobs = static_cast<int32_t>(top.value_or(0));
  return true;
}

// prediction: {"type": "content", "content": a string or text parts (concatenated, as OpenAI
// takes them)}.
ApiResult<std::optional<std::string>> parse_prediction(const Json& body) {
  const Json* pred = field(body, "prediction");
  if (!pred) return std::nullopt;
  const Json* type = pred->is_object() ? field(*pred, "type") : nullptr;
  if (!type || *type != "content") {
    return std::unexpected(ApiError::invalid(
        "'prediction' must be an object {\"type\": \"content\", \"content\": ...}", "prediction"));
  }
  for (auto it = pred->begin(); it != pred->end(); ++it) {
    if (it.key() != "type" && it.key() != "content" && !it->is_null()) {
      return std::unexpected(ApiError::invalid(
          fmt::format("unknown field 'prediction.{}'", it.key().substr(0, 100)), "prediction"));
    }
  }
  const Json* content = field(*pred, "content");
  if (content && content->is_string()) return content->get<std::string>();
  if (!content || !content->is_array()) {
    return std::unexpected(ApiError::invalid("'prediction.content' must be a string or an array of text parts",
                                             "prediction"));
  }
  std::string text;
  for (const Json& part : *content) {
    const Json* t = part.is_object() ? field(part, "type") : nullptr;
    const Json* pt = part.is_object() ? field(part, "text") : nullptr;
    if (!t || *t != "text" || !pt || !pt->is_string()) {
      return std::unexpected(ApiError::invalid("'prediction.content' parts must be {\"type\": \"text\", \"text\": ...}",
                                               "prediction"));
    }
    text += pt->get<std::string>();
  }
  return text;
}

// The fields both generating routes share, in the order a client's mistakes are reported.
ApiResult<GenerationParams> parse_generation(const Json& body, bool chat) {
  GenerationParams p;
  SLUICE_API_TRY([[maybe_unused]] bool names_ok, check_field_names(body, chat ? kChat : kCompletion));
  SLUICE_API_TRY([[maybe_unused]] bool ok, refuse_unsupported(body));
  SLUICE_API_TRY(auto model, get_string(body, "model"));
  p.model = model.value_or("");
  SLUICE_API_TRY(auto n, get_int(body, "n", 1, kMaxChoices));
  p.n = static_cast<int32_t>(n.value_or(1));
  SLUICE_API_TRY([[maybe_unused]] bool lengths_ok, parse_lengths(body, chat, p));
  SLUICE_API_TRY(p.sampling, parse_sampling(body));
  SLUICE_API_TRY(p.seed, parse_seed(body));
  SLUICE_API_TRY([[maybe_unused]] bool stops_ok, parse_stops(body, p));
  SLUICE_API_TRY([[maybe_unused]] bool stream_ok, parse_stream(body, p));
  SLUICE_API_TRY([[maybe_unused]] bool logprobs_ok, parse_logprobs(body, chat, p));
  SLUICE_API_TRY(auto as_ids, get_bool(body, "return_tokens_as_token_ids"));
  p.tokens_as_ids = as_ids.value_or(false);
  SLUICE_API_TRY(auto user, get_string(body, "user"));
  p.user = user.value_or("");
  SLUICE_API_TRY(auto priority, get_int(body, "priority", std::numeric_limits<int32_t>::min(),
                                        std::numeric_limits<int32_t>::max()));
  p.priority = static_cast<int32_t>(priority.value_or(0));
  SLUICE_API_TRY(auto speculative, get_bool(body, "speculative"));
  p.speculative = speculative.value_or(true);
  SLUICE_API_TRY(p.response_format, parse_response_format(body));
  if (p.response_format == ResponseFormat::kJsonObject && p.min_tokens > 0) {
    return std::unexpected(
        ApiError::invalid("'min_tokens' cannot be combined with a JSON 'response_format': the "
                          "output ends when the JSON object is complete",
                          "min_tokens"));
  }
  SLUICE_API_TRY(p.prediction, parse_prediction(body));
  return p;
}

}  // namespace

ApiResult<CompletionRequest> parse_completion_request(const Json& body) {
  CompletionRequest r;
  SLUICE_API_TRY(r.params, parse_generation(body, /*chat=*/false));
  const Json* prompt = field(body, "prompt");
  if (!prompt) return std::unexpected(ApiError::invalid("'prompt' is required", "prompt"));
  const char* expected = "a string, an array of token ids, or an array of either";
  if (prompt->is_string()) {
    r.prompts.push_back({.text = prompt->get<std::string>()});
  } else if (prompt->is_array()) {
    if (prompt->empty()) return std::unexpected(ApiError::invalid("'prompt' must not be empty", "prompt"));
    const Json& first = (*prompt)[0];
    if (first.is_number()) {
      SLUICE_API_TRY(auto ids, token_array(*prompt, "prompt"));
      r.prompts.push_back({.is_tokens = true, .tokens = std::move(ids)});
    } else {
      for (size_t i = 0; i < prompt->size(); ++i) {
        const Json& p = (*prompt)[i];
        if (p.is_string()) {
          r.prompts.push_back({.text = p.get<std::string>()});
        } else if (p.is_array() && !p.empty()) {
          SLUICE_API_TRY(auto ids, token_array(p, fmt::format("prompt[{}]", i).c_str()));
          r.prompts.push_back({.is_tokens = true, .tokens = std::move(ids)});
        } else {
          return std::unexpected(ApiError::invalid(
              fmt::format("'prompt' must be {}; found an element of type {}", expected,
                          p.is_array() ? "empty array" : json_type_name(p)),
              "prompt"));
        }
      }
    }
  } else {
    return std::unexpected(wrong_type("prompt", expected, *prompt));
  }
  if (r.prompts.size() * static_cast<size_t>(r.params.n) > static_cast<size_t>(kMaxChoices)) {
    return std::unexpected(ApiError::invalid(
        fmt::format("{} prompts x n = {} asks for {} choices; at most {} per request", r.prompts.size(), r.params.n,
                    r.prompts.size() * r.params.n, kMaxChoices),
        r.params.n > 1 ? "n" : "prompt"));
  }
  return r;
}

ApiResult<ChatRequest> parse_chat_request(const Json& body) {
  ChatRequest r;
  SLUICE_API_TRY(r.params, parse_generation(body, /*chat=*/true));
  SLUICE_API_TRY(r.messages, parse_messages(body));
  SLUICE_API_TRY(r.tools, parse_tools(body));
  SLUICE_API_TRY(r.template_kwargs, parse_template_kwargs(body));
  SLUICE_API_TRY(auto agp, get_bool(body, "add_generation_prompt"));
  r.add_generation_prompt = agp.value_or(true);
  return r;
}

ApiResult<TokenizeRequest> parse_tokenize_request(const Json& body) {
  TokenizeRequest r;
  SLUICE_API_TRY([[maybe_unused]] bool names_ok, check_field_names(body, kTokenize));
  SLUICE_API_TRY(auto model, get_string(body, "model"));
  r.model = model.value_or("");
  const bool has_prompt = field(body, "prompt") != nullptr, has_messages = field(body, "messages") != nullptr;
  if (has_prompt == has_messages) {
    return std::unexpected(ApiError::invalid("give exactly one of 'prompt' (a string) and 'messages'", "prompt"));
  }
  if (has_prompt) {
    SLUICE_API_TRY(auto prompt, get_string(body, "prompt"));
    r.prompt = std::move(*prompt);
  } else {
    r.is_chat = true;
    SLUICE_API_TRY(r.messages, parse_messages(body));
    SLUICE_API_TRY(r.tools, parse_tools(body));
    SLUICE_API_TRY(r.template_kwargs, parse_template_kwargs(body));
    SLUICE_API_TRY(auto agp, get_bool(body, "add_generation_prompt"));
    r.add_generation_prompt = agp.value_or(true);
  }
  // Chat prompts carry their own special tokens (from the template), as vLLM's default.
  SLUICE_API_TRY(auto special, get_bool(body, "add_special_tokens"));
  r.add_special_tokens = special.value_or(!r.is_chat);
  return r;
}

ApiResult<DetokenizeRequest> parse_detokenize_request(const Json& body) {
  DetokenizeRequest r;
  SLUICE_API_TRY([[maybe_unused]] bool names_ok, check_field_names(body, kDetokenize));
  SLUICE_API_TRY(auto model, get_string(body, "model"));
  r.model = model.value_or("");
  const Json* tokens = field(body, "tokens");
  if (!tokens) return std::unexpected(ApiError::invalid("'tokens' is required", "tokens"));
  if (!tokens->is_array()) return std::unexpected(wrong_type("tokens", "an array of integers", *tokens));
  SLUICE_API_TRY(r.tokens, token_array(*tokens, "tokens"));
  return r;
}

}  // namespace sluice::server
