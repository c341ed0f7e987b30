#include "server/api.h"

#include <fmt/format.h>

#include <unordered_set>

#include "server/chat_messages.h"

namespace sluice::server {
namespace {

ApiError submit_error(const Status& s, std::string_view prompt_key, bool completion) {
  switch (s.code()) {
    case StatusCode::kInvalid:
      return ApiError::invalid(s.message(), engine_error_param(s.message(), prompt_key, completion));
    case StatusCode::kOverloaded: return ApiError::overloaded(s.message());
    case StatusCode::kUnavailable: return ApiError::unavailable(s.message());
    default: return ApiError::internal(s.message());
  }
}

}  // namespace

std::string engine_error_param(std::string_view message, std::string_view prompt_key, bool completion) {
  static constexpr std::pair<std::string_view, std::string_view> kFields[] = {
      {"temperature ", "temperature"}, {"top_k ", "top_k"}, {"top_p ", "top_p"}, {"min_p ", "min_p"},
      {"repetition_penalty ", "repetition_penalty"}, {"presence_penalty ", "presence_penalty"},
      {"frequency_penalty ", "frequency_penalty"}, {"min_tokens", "min_tokens"}, {"max tokens ", "max_tokens"},
      {"prediction ", "prediction"}, {"stop token id ", "stop_token_ids"}};
  if (message.starts_with("the prompt") || message.starts_with("prompt token")) return std::string(prompt_key);
  if (message.starts_with("top_logprobs ")) return completion ? "logprobs" : "top_logprobs";
  for (auto [prefix, param] : kFields) {
    if (message.starts_with(prefix)) return std::string(param);
  }
  return {};
}

OpenAiApi::OpenAiApi(Engine& engine, const Tokenizer& tokenizer, chat::ChatTemplate chat_template, ApiConfig config)
    : engine_(engine),
      tokenizer_(tokenizer),
      chat_template_(std::move(chat_template)),
      message_forms_(chat::probe_message_forms(chat_template_)),
      config_(std::move(config)) {
  if (!config_.now) config_.now = [] { return std::chrono::system_clock::now(); };
}

Json OpenAiApi::models() const {
  Json m = {{"id", config_.model_name},
            {"object", "model"},
            {"created", config_.created},
            {"owned_by", "sluice"},
            {"max_model_len", engine_.max_sequence_tokens()},
            {"system_fingerprint", config_.system_fingerprint}};
  return {{"object", "list"}, {"data", Json::array({std::move(m)})}};
}

ApiResult<Json> OpenAiApi::model(const std::string& id) const {
  if (id != config_.model_name) {
    return std::unexpected(ApiError::model_not_found(
        fmt::format("The model '{}' does not exist; this server serves '{}'", id, config_.model_name)));
  }
  return models()["data"][0];
}

ApiResult<bool> OpenAiApi::check_model(const std::string& model) const {
  if (model.empty() || model == config_.model_name) return true;
  return std::unexpected(ApiError::model_not_found(
      fmt::format("The model '{}' does not exist; this server serves '{}'", model, config_.model_name)));
}

ApiResult<std::vector<int32_t>> OpenAiApi::encode(const PromptInput& prompt, bool add_bos, bool parse_special,
                                                  const char* param, bool continues) const {
  if (prompt.is_tokens) {
    for (size_t i = 0; i < prompt.tokens.size(); ++i) {
      if (prompt.tokens[i] >= tokenizer_.vocab_size()) {
        return std::unexpected(ApiError::invalid(
            fmt::format("'{}' token {} (at index {}) is outside the vocabulary (0..{})", param, prompt.tokens[i], i,
                        tokenizer_.vocab_size() - 1),
            param));
      }
    }
    return prompt.tokens;
  }
  // A text longer than the context could hold at the longest token cannot fit: refused
  // before tokenizing megabytes.
  const int64_t limit = engine_.max_sequence_tokens();
  const int64_t max_bytes = limit * tokenizer_.max_bytes_per_token();
  if (static_cast<int64_t>(prompt.text.size()) > max_bytes) {
    // (A prediction is held to the same bound: none of its tokens past the context could be used.)
    const bool prediction = std::string_view(param) == "prediction";
    return std::unexpected(ApiError::invalid(
        fmt::format("This model's maximum context length is {} tokens, but the {} has {} bytes, more than {} "
                    "tokens can hold (at most {} bytes each){}",
                    limit, prediction ? "prediction" : "prompt", prompt.text.size(), limit,
                    tokenizer_.max_bytes_per_token(),
                    prediction ? "; only the prediction's first tokens can ever be drafted: send fewer" : ""),
        param));
  }
  auto ids = tokenizer_.encode(prompt.text, {.add_bos = add_bos, .parse_special = parse_special, .continues = continues});
  if (!ids) return std::unexpected(ApiError::invalid(ids.error().message(), param));
  return std::move(*ids);
}

namespace {

// A message field or role that the chat template never renders would be dropped from the
// prompt without a word (Qwen2.5's template has no branch for a "function" message, and none
// of the common templates prints a message's "name"). A name the template's text uses (a role
// it compares with, as a string literal; a field it reads, as a word) is taken as rendered: Qwen's templates print a
// default system prompt, the same as a system message that repeats it, and drop reasoning_content before the last
// question by design. For any other, rendering again without it (a role that every message has: with their text
// changed) and getting the same prompt proves it was dropped: a 400, not an answer to another conversation. A render
// that fails without it (a template that checks the order of roles) counts as rendering it.
// One render per such name, each cheap next to the prompt's prefill, and at most
// kMaxUnnamed of each kind: a request naming thousands would cost thousands of renders.
template <typename Render, typename Names, typename Quotes>
// `original`: the messages as the request sent them (roles before "developer" became "system").
ApiResult<bool> check_rendered(const Json& messages, const Json& original, const std::string& prompt, Render&& render,
                               Names&& names, Quotes&& quotes) {
  constexpr size_t kMaxUnnamed = 8;
  // Fields every template may go without: the message's own shape and ids.
  static constexpr std::string_view kCore[] = {"role", "content", "tool_calls", "tool_call_id"};
  std::vector<std::string> fields, roles;
  std::unordered_set<std::string> seen_fields, seen_roles;
  auto too_many = [&](const char* what) {
    return std::unexpected(ApiError::invalid(
        fmt::format("the messages hold more than {} {} that this model's chat template does not name", kMaxUnnamed,
                    what),
        "messages"));
  };
  for (const Json& m : messages) {
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (std::ranges::find(kCore, it.key()) != std::end(kCore) || it->is_null()) continue;
      if (!seen_fields.insert(it.key()).second || names(it.key())) continue;
      fields.push_back(it.key());
      if (fields.size() > kMaxUnnamed) return too_many("fields");
    }
    const std::string role = m.value("role", std::string());
    const auto content = m.find("content");
    const bool says_something =
        (content != m.end() && ((content->is_string() && !content->get<std::string>().empty()) ||
                                (content->is_array() && !content->empty()))) ||
        m.contains("tool_calls");
    if (role == "user" || role == "assistant" || !says_something) continue;
    if (!seen_roles.insert(role).second || quotes(role)) continue;
    roles.push_back(role);
    if (roles.size() > kMaxUnnamed) return too_many("roles");
  }
  auto first_index = [&](auto&& pred) {
    for (size_t i = 0; i < messages.size(); ++i) {
      if (pred(messages[i])) return i;
    }
    return size_t{0};
  };
  for (const std::string& key : fields) {
    Json without = messages;
    for (Json& m : without) m.erase(key);
    auto other = render(without);
    if (other && *other == prompt) {
      const size_t i = first_index([&](const Json& m) { return m.contains(key) && !m.at(key).is_null(); });
      return std::unexpected(ApiError::invalid(
          fmt::format("'messages[{}].{}': this model's chat template does not render a message's '{}', so the model "
                      "would never see it",
                      i, key.substr(0, 100), key.substr(0, 100)),
          fmt::format("messages[{}]", i)));
    }
  }
  for (const std::string& role : roles) {
    Json without = Json::array();
    for (const Json& m : messages) {
      if (m.value("role", std::string()) != role) without.push_back(m);
    }
    if (without.empty()) {
      // Every message has the role: nothing would be left to render (a template that reads
      // messages[0] fails on none), so their text changes instead, and a prompt that stays the
      // same shows that it was never in it.
      without = messages;
      for (Json& m : without) {
        const auto content = m.find("content");
        m["content"] = (content != m.end() && content->is_string() ? content->get<std::string>() : "") + " (changed)";
      }
    }
    auto other = render(without);
    if (other && *other == prompt) {
      const size_t i = first_index([&](const Json& m) { return m.value("role", std::string()) == role; });
      const std::string sent = original[i].value("role", std::string());
      return std::unexpected(ApiError::invalid(
          fmt::format("'messages[{}]': this model's chat template does not render messages with role '{}'{}, so the "
                      "model would never see them",
                      i, role.substr(0, 100),
                      sent == role ? std::string() : fmt::format(" (the '{}' message is sent as one)", sent.substr(0, 100))),
          fmt::format("messages[{}]", i)));
    }
  }
  return true;
}

}  // namespace

ApiResult<std::string> OpenAiApi::render_chat(const Json& request_messages, const Json& tools, const Json& kwargs,
                                              bool add_generation_prompt) const {
  // OpenAI's "developer" role is its newer name for "system": a template that does not know it
  // would drop the message, so it becomes a system message there.
  Json messages = request_messages;
  if (!chat_template_.quotes("developer")) {
    for (Json& m : messages) {
      if (m["role"] == "developer") m["role"] = "system";
    }
  }
  messages = for_template(messages, message_forms_);
  // Tools and tool calls that the template cannot render would be dropped from the prompt
  // without a word, and the model would answer as if they were not there.
  if (tools.is_array() && !tools.empty() && !chat_template_.names("tools")) {
    return std::unexpected(ApiError::invalid(
        "this model's chat template does not render tools, so the model would never see them; send "
        "tool_choice \"none\" (or no tools) to leave them out",
        "tools"));
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto calls = messages[i].find("tool_calls");  // null or [] (as some clients send) is none
    if (calls != messages[i].end() && !calls->is_null() && !(calls->is_array() && calls->empty()) &&
        !chat_template_.names("tool_calls")) {
      return std::unexpected(ApiError::invalid(
          fmt::format("'messages[{}].tool_calls': this model's chat template does not render tool calls, so the "
                      "model would never see them",
                      i),
          fmt::format("messages[{}]", i)));
    }
  }
  auto token_text = [&](int32_t id) {
    return id >= 0 && id < tokenizer_.vocab_size() ? tokenizer_.token_text(id) : std::string();
  };
  chat::RenderOptions options;
  options.now = config_.now();
  auto render = [&](const Json& with) {
    return chat_template_.render(chat::template_context(with, tools, kwargs, add_generation_prompt,
                                                        token_text(tokenizer_.bos_id()), token_text(tokenizer_.eos_id())),
                                 options);
  };
  auto prompt = render(messages);
  if (prompt) {
    SLUICE_API_TRY([[maybe_unused]] bool ok, check_rendered(
                                                 messages, request_messages, *prompt, render,
                                                 [&](const std::string& n) { return chat_template_.names(n); },
                                                 [&](const std::string& n) { return chat_template_.quotes(n); }));
  }
  if (!prompt) {
    // raise_exception() in a template means the messages are wrong; anything else is the
    // template's fault, still caused by this request's input.
    return std::unexpected(ApiError::invalid(
        prompt.error().code() == StatusCode::kInvalid ? prompt.error().message()
                                                      : "the chat template failed: " + prompt.error().message(),
        "messages"));
  }
  return std::move(*prompt);
}

ApiResult<std::unique_ptr<Generation>> OpenAiApi::submit(Generation::Kind kind, const GenerationParams& params,
                                                         std::vector<std::vector<int32_t>> prompts,
                                                         std::vector<std::string> echo_texts,
                                                         std::vector<bool> echo_from_text) const {
  const int32_t limit = engine_.max_sequence_tokens();
  const int64_t choices = static_cast<int64_t>(prompts.size()) * params.n;
  if (choices > engine_.config().max_queued_requests) {
    // No retry could ever admit it: a 400, not a 429.
    return std::unexpected(ApiError::invalid(
        fmt::format("this request asks for {} choices ({} prompt(s) x n = {}), more than the server queues at once "
                    "(--max-queued-requests {}); lower n or send fewer prompts",
                    choices, prompts.size(), params.n, engine_.config().max_queued_requests),
        "n"));
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto n = static_cast<int64_t>(prompts[i].size());
    const std::string which = prompts.size() > 1 ? fmt::format("prompt {} has", i) : "the prompt has";
    // Scoring alone (max_tokens 0) may fill the context; generating needs room for a token.
    if (n > limit || (n == limit && params.max_tokens != 0)) {
      return std::unexpected(ApiError::invalid(
          n > limit ? fmt::format("This model's maximum context length is {} tokens, but {} {} tokens", limit, which, n)
                    : fmt::format("This model's maximum context length is {} tokens, and {} {}: no room is left for "
                                  "the completion (max_tokens 0 scores it)", limit, which, n),
          kind == Generation::Kind::kChat ? "messages" : "prompt"));
    }
    if (params.max_tokens && n + *params.max_tokens > limit) {
      return std::unexpected(ApiError::invalid(
          fmt::format("This model's maximum context length is {} tokens, but {} tokens were requested ({} in the "
                      "prompt, {} for the completion); lower {} or the prompt",
                      limit, n + *params.max_tokens, n, *params.max_tokens, params.max_tokens_key),
          params.max_tokens_key));
    }
  }
  std::vector<int32_t> prediction;
  if (params.prediction) {
    // A prediction continues the prompt: no SPM space in front (its tokens were one longer than
    // the answer's, an extra space token first).
    SLUICE_API_TRY(prediction, encode({.text = *params.prediction}, /*add_bos=*/false, /*parse_special=*/false,
                                      "prediction", /*continues=*/true));
  }
  std::unique_ptr<Generation> g(new Generation(kind, tokenizer_, config_));
  g->prediction_ = prediction;
  g->model_ = config_.model_name;
  g->stream_ = params.stream;
  g->include_usage_ = params.include_usage;
  g->logprobs_ = params.logprobs;
  g->echo_ = params.echo;
  g->tokens_as_ids_ = params.tokens_as_ids;
  std::vector<Request> requests;
  std::vector<int32_t> prompt_of;
  for (size_t p = 0; p < prompts.size(); ++p) {
    if (params.echo) {
      g->echo_texts_.push_back(p < echo_texts.size() ? echo_texts[p] : tokenizer_.decode(prompts[p]));
      g->echo_from_text_.push_back(p < echo_from_text.size() && echo_from_text[p]);
      if (params.logprobs) g->echo_prompts_.push_back(prompts[p]);
    }
    g->prompt_lengths_.push_back(static_cast<int32_t>(prompts[p].size()));
    for (int32_t s = 0; s < params.n; ++s) {
      Request r;
      r.prompt_tokens = prompts[p];
      r.sampling = params.sampling;
      if (params.seed) r.seed = *params.seed + static_cast<uint64_t>(s);
      r.max_tokens = params.max_tokens.value_or(kind == Generation::Kind::kChat
                                                    ? limit - static_cast<int32_t>(prompts[p].size())
                                                    : 16);
      r.stop_strings = params.stop;
      r.stop_token_ids = params.stop_token_ids;
      r.include_stop_str_in_output = params.include_stop_str_in_output;
      r.min_tokens = params.min_tokens;
      r.ignore_eos = params.ignore_eos;
      r.logprobs = params.logprobs;
      r.prompt_logprobs = params.echo && params.logprobs;
      r.priority = params.priority;
      r.session = params.user;
      r.prediction_tokens = prediction;
      r.speculative = params.speculative;
      r.response_format = params.response_format;
      requests.push_back(std::move(r));
      prompt_of.push_back(static_cast<int32_t>(p));
    }
  }
  // All choices or none: a refused one (the queue full, say) leaves nothing submitted.
  auto handles = engine_.submit_all(std::move(requests));
  if (!handles) {
    const bool completion = kind == Generation::Kind::kCompletion;
    return std::unexpected(submit_error(handles.error(), completion ? "prompt" : "messages", completion));
  }
  for (size_t i = 0; i < handles->size(); ++i) g->add_choice(prompt_of[i], std::move((*handles)[i]));
  return g;
}

ApiResult<std::unique_ptr<Generation>> OpenAiApi::start_completion(const Json& body) const {
  SLUICE_API_TRY(CompletionRequest req, parse_completion_request(body));
  SLUICE_API_TRY([[maybe_unused]] bool ok, check_model(req.params.model));
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> echo_texts;  // echo: a text prompt as sent, token ids decoded
  std::vector<bool> echo_from_text;
  for (size_t i = 0; i < req.prompts.size(); ++i) {
    const PromptInput& p = req.prompts[i];
    // As Hugging Face tokenizers (and so vLLM) do: special tokens written in the text count. In
    // a batch, an error names its prompt.
    const std::string param = req.prompts.size() == 1 ? "prompt" : fmt::format("prompt[{}]", i);
    SLUICE_API_TRY(auto ids, encode(p, /*add_bos=*/true, /*parse_special=*/true, param.c_str()));
    if (req.params.echo) {
      echo_texts.push_back(p.is_tokens ? tokenizer_.decode(ids) : p.text);
      echo_from_text.push_back(!p.is_tokens);
    }
    prompts.push_back(std::move(ids));
  }
  return submit(Generation::Kind::kCompletion, req.params, std::move(prompts), std::move(echo_texts),
                std::move(echo_from_text));
}

ApiResult<std::unique_ptr<Generation>> OpenAiApi::start_chat(const Json& body) const {
  SLUICE_API_TRY(ChatRequest req, parse_chat_request(body));
  SLUICE_API_TRY([[maybe_unused]] bool ok, check_model(req.params.model));
  SLUICE_API_TRY(std::string text, render_chat(req.messages, req.tools, req.template_kwargs, req.add_generation_prompt));
  SLUICE_API_TRY(auto ids, encode({.text = std::move(text)}, /*add_bos=*/false, /*parse_special=*/true, "messages"));
  std::vector<std::vector<int32_t>> prompts;
  prompts.push_back(std::move(ids));
  return submit(Generation::Kind::kChat, req.params, std::move(prompts));
}

ApiResult<Json> OpenAiApi::tokenize(const Json& body) const {
  SLUICE_API_TRY(TokenizeRequest req, parse_tokenize_request(body));
  SLUICE_API_TRY([[maybe_unused]] bool ok, check_model(req.model));
  // Counted whatever the context holds, unlike a prompt (encode): this is how a client finds that
  // a text is too long. The request body's limit bounds the work.
  auto count = [&](const std::string& text, const char* param) -> ApiResult<std::vector<int32_t>> {
    auto ids = tokenizer_.encode(text, {.add_bos = req.add_special_tokens, .parse_special = true});
    if (!ids) return std::unexpected(ApiError::invalid(ids.error().message(), param));
    return std::move(*ids);
  };
  std::vector<int32_t> ids;
  if (req.is_chat) {
    // The chat request's own rendering (tools and kwargs included), so the count is its prompt_tokens.
    SLUICE_API_TRY(std::string text, render_chat(req.messages, req.tools, req.template_kwargs, req.add_generation_prompt));
    SLUICE_API_TRY(ids, count(text, "messages"));
  } else {
    SLUICE_API_TRY(ids, count(req.prompt, "prompt"));
  }
  return Json{{"count", ids.size()}, {"max_model_len", engine_.max_sequence_tokens()}, {"tokens", ids}};
}

ApiResult<Json> OpenAiApi::detokenize(const Json& body) const {
  SLUICE_API_TRY(DetokenizeRequest req, parse_detokenize_request(body));
  SLUICE_API_TRY([[maybe_unused]] bool ok, check_model(req.model));
  for (size_t i = 0; i < req.tokens.size(); ++i) {
    if (req.tokens[i] >= tokenizer_.vocab_size()) {
      return std::unexpected(ApiError::invalid(
          fmt::format("token {} (at index {}) is outside the vocabulary (0..{})", req.tokens[i], i,
                      tokenizer_.vocab_size() - 1),
          "tokens"));
    }
  }
  // Control tokens as their text (vLLM's and llama.cpp's /detokenize keep them): a rendered chat
  // prompt comes back whole, and /tokenize of it gives the same tokens.
  return Json{{"prompt", tokenizer_.decode(req.tokens, /*render_special=*/true)}};
}

}  // namespace sluice::server
