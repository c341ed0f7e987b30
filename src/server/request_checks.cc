#include "server/request_checks.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "server/request_fields.h"

namespace sluice::server {
namespace {

// Every field a route implements (or accepts at certain values, checked below).
struct KnownField {
  const char* name;
  unsigned routes;
};
constexpr KnownField kKnownFields[] = {
    {"model", kCompletion | kChat | kTokenize | kDetokenize},
    {"prompt", kCompletion | kTokenize},
    {"messages", kChat | kTokenize},
    {"tokens", kDetokenize},
    {"max_tokens", kCompletion | kChat},
    {"max_completion_tokens", kChat},
    {"min_tokens", kCompletion | kChat},
    {"temperature", kCompletion | kChat},
    {"top_p", kCompletion | kChat},
    {"top_k", kCompletion | kChat},
    {"min_p", kCompletion | kChat},
    {"n", kCompletion | kChat},
    {"stop", kCompletion | kChat},
    {"stop_token_ids", kCompletion | kChat},
    {"include_stop_str_in_output", kCompletion | kChat},
    {"ignore_eos", kCompletion | kChat},
    {"seed", kCompletion | kChat},
    {"logprobs", kCompletion | kChat},
    {"top_logprobs", kChat},
    {"presence_penalty", kCompletion | kChat},
    {"frequency_penalty", kCompletion | kChat},
    {"repetition_penalty", kCompletion | kChat},
    {"stream", kCompletion | kChat},
    {"stream_options", kCompletion | kChat},
    {"user", kCompletion | kChat},
    {"priority", kCompletion | kChat},
    {"prediction", kCompletion | kChat},
    {"speculative", kCompletion | kChat},
    {"echo", kCompletion},
    {"return_tokens_as_token_ids", kCompletion | kChat},
    {"tools", kChat | kTokenize},
    {"tool_choice", kChat | kTokenize},
    {"parallel_tool_calls", kChat},
    {"chat_template_kwargs", kChat | kTokenize},
    {"add_generation_prompt", kChat | kTokenize},
    {"add_special_tokens", kTokenize},
    // Accepted at their no-op values only (refuse_unsupported):
    {"suffix", kCompletion},
    {"best_of", kCompletion},
    {"logit_bias", kCompletion | kChat},
    {"response_format", kCompletion | kChat},
    {"skip_special_tokens", kCompletion | kChat},
    {"spaces_between_special_tokens", kCompletion | kChat},
    {"use_beam_search", kCompletion | kChat},
    {"modalities", kChat},
};

// What a refused field is, for its message.
constexpr std::pair<const char*, const char*> kRefusedFields[] = {
    {"guided_json", "structured output (guided decoding)"},
    {"guided_regex", "structured output (guided decoding)"},
    {"guided_choice", "structured output (guided decoding)"},
    {"guided_grammar", "structured output (guided decoding)"},
    {"guided_decoding_backend", "structured output (guided decoding)"},
    {"structured_outputs", "structured output (guided decoding)"},
    {"functions", "the deprecated function calling API (use tools)"},
    {"function_call", "the deprecated function calling API (use tools)"},
    {"audio", "audio output"},
    {"reasoning_effort", "reasoning effort"},
    {"web_search_options", "web search"},
    {"prompt_logprobs", "prompt logprobs"},
    {"allowed_token_ids", "token restrictions"},
    {"bad_words", "token restrictions"},
    {"truncate_prompt_tokens", "prompt truncation"},
    {"continue_final_message", "continuing the final message"},
    {"documents", "documents for the chat template"},
};

}  // namespace

ApiResult<bool> check_field_names(const Json& body, unsigned route) {
  for (auto it = body.begin(); it != body.end(); ++it) {
    const std::string& key = it.key();
    if (it->is_null()) continue;  // null counts as absent
    bool known = false;
    for (const KnownField& f : kKnownFields) {
      if (key == f.name && (f.routes & route)) known = true;
    }
    for (const char* f : kIgnoredFields) {
      if (key != f) continue;
      // Ignored, yet of the type OpenAI takes: a wrong one is a client bug worth a 400 there too.
      const bool ok = key == "store"      ? it->is_boolean()
                      : key == "metadata" ? it->is_object() && std::ranges::all_of(*it, [](const Json& v) { return v.is_string(); })
                                          : it->is_string();
      if (!ok) {
        return std::unexpected(wrong_type(key, key == "store"      ? "a boolean"
                                               : key == "metadata" ? "an object of strings"
                                                                   : "a string",
                                          *it));
      }
      known = true;
    }
    if (known) continue;
    for (const auto& [name, what] : kRefusedFields) {
      if (key == name) {
        return std::unexpected(ApiError::invalid(
            fmt::format("'{}' is not supported: sluice does not implement {}", key, what), key));
      }
    }
    return std::unexpected(ApiError::invalid(
        fmt::format("unknown field '{}'; sluice refuses fields it does not implement rather than ignore them "
                    "(the README lists the fields it accepts)",
                    key.substr(0, 100)),
        key.substr(0, 100)));
  }
  return true;
}

// Fields that change what is generated but that sluice does not implement: refusing them is
// better than answering as if they had been applied.
ApiResult<bool> refuse_unsupported(const Json& body) {
  if (auto v = field(body, "logit_bias"); v && !(v->is_object() && v->empty())) {
    return std::unexpected(ApiError::invalid("'logit_bias' is not supported", "logit_bias"));
  }
  // best_of: at least n (OpenAI's rule); only best_of = n (every candidate returned) is done.
  auto best_of = get_int(body, "best_of", 1, 1 << 20);
  if (!best_of) return std::unexpected(best_of.error());
  if (*best_of) {
    auto n = get_int(body, "n", 1, 1 << 20);
    const int64_t choices = n && *n ? **n : 1;
    if (**best_of < choices) {
      return std::unexpected(ApiError::invalid(
          fmt::format("'best_of' ({}) must be at least n ({})", **best_of, choices), "best_of"));
    }
    if (**best_of != choices) {
      return std::unexpected(ApiError::invalid("'best_of' other than n is not supported", "best_of"));
    }
  }
  if (auto v = field(body, "suffix"); v && !(v->is_string() && v->get<std::string>().empty())) {
    return std::unexpected(ApiError::invalid("'suffix' is not supported", "suffix"));
  }
  for (const char* key : {"skip_special_tokens", "spaces_between_special_tokens"}) {
    if (auto v = field(body, key); v && !(v->is_boolean() && v->get<bool>())) {
      return std::unexpected(ApiError::invalid(fmt::format("'{}' other than true is not supported", key), key));
    }
  }
  if (auto v = field(body, "use_beam_search"); v && !(v->is_boolean() && !v->get<bool>())) {
    return std::unexpected(ApiError::invalid("'use_beam_search' is not supported", "use_beam_search"));
  }
  if (auto v = field(body, "modalities"); v && *v != Json::array({"text"})) {
    return std::unexpected(ApiError::invalid("only 'modalities' [\"text\"] is supported", "modalities"));
  }
  if (auto v = field(body, "parallel_tool_calls"); v && !(v->is_boolean() && v->get<bool>())) {
    return std::unexpected(ApiError::invalid(
        "'parallel_tool_calls' false is not supported (sluice does not constrain tool calls)", "parallel_tool_calls"));
  }
  return true;
}

}  // namespace sluice::server
