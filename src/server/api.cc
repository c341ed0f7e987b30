#include "server/api.h"

#include <atomic>
#include <random>
#include <unordered_set>

#include <fmt/format.h>

#include "common/utf8.h"
#include "engine/spec/prediction_proposer.h"
#include "tokenizer/stream_decoder.h"

namespace sluice::server {
namespace {

int64_t unix_seconds(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}

// Response ids: unique within the process and unlikely to repeat across restarts.
std::string make_id(std::string_view prefix) {
  static const uint64_t process_salt = std::random_device{}() * 0x9E3779B97F4A7C15ull ^ std::random_device{}();
  static std::atomic<uint64_t> counter{0};
  uint64_t x = process_salt + 0x9E3779B97F4A7C15ull * ++counter;
  x = (x ^ (x >> 31)) * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return fmt::format("{}-{:016x}", prefix, x);
}

ApiError submit_error(const Status& s, std::string_view prompt_key, bool completion) {
  switch (s.code()) {
    case StatusCode::kInvalid:
      return ApiError::invalid(s.message(), engine_error_param(s.message(), prompt_key, completion));
    case StatusCode::kOverloaded: return ApiError::overloaded(s.message());
    case StatusCode::kUnavailable: return ApiError::unavailable(s.message());
    default: return ApiError::internal(s.message());
  }
}

const char* finish_reason_json(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "abort";
    case FinishReason::kError: return "error";
  }
  return "error";
}

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

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


// ---- Generation ----

struct Generation::Choice {
  int32_t index = 0;
  int32_t prompt_index = 0;
  std::optional<RequestHandle> handle;
  std::string text;                  // non-streaming: the whole output
  std::vector<TokenOutput> tokens;   // non-streaming with logprobs
  bool role_sent = false;            // chat streaming: the first delta carries the role
  bool finished = false;
  FinishReason reason = FinishReason::kLength;
  std::string error;
  RequestMetrics metrics;
  int64_t text_offset = 0;           // completions logprobs: bytes of text before the next token
  // The output's text as the engine decodes it (control tokens add none, bytes that are no
  // UTF-8 become U+FFFD's three), so that each text_offset points into the text returned.
  std::optional<StreamDecoder> offset_decoder;
  std::vector<TokenOutput> prompt_scores;  // echo with logprobs: prompt tokens 1..n-1
  std::vector<int32_t> output_ids;         // with a prediction: the output, to count its use
  bool echoed = false;               // streaming echo: the prompt's chunk was sent
};

Generation::Generation(Kind kind, const Tokenizer& tokenizer, const ApiConfig& config)
    : kind_(kind), tokenizer_(tokenizer), config_(config),
      id_(make_id(kind == Kind::kChat ? "chatcmpl" : "cmpl")),
      created_(unix_seconds(config.now())) {}

Generation::~Generation() = default;

void Generation::on_output(const std::function<void()>& callback) {
  for (auto& c : choices_) {
    if (!c->finished) c->handle->on_output(callback);
  }
}

void Generation::cancel() {
  for (auto& c : choices_) {
    if (!c->finished) c->handle->cancel();
  }
}

std::string Generation::token_name(int32_t id) const {
  if (tokens_as_ids_) return fmt::format("token_id:{}", id);
  const std::string piece = tokenizer_.token_to_piece(id, /*render_special=*/true);
  if (utf8_is_valid(piece)) return piece;
  // Part of a character (byte-level vocabularies split them): its bytes, as OpenAI names such
  // tokens ("bytes:\xe2\x80"), so two of them are not both U+FFFD (and one key in top_logprobs).
  std::string name = "bytes:";
  for (const unsigned char b : piece) name += fmt::format("\\x{:02x}", b);
  return name;
}

Json Generation::legacy_top(const TokenOutput& t) const {
  Json top = Json::object();
  for (const TokenLogprob& alt : t.top) top[token_name(alt.token_id)] = alt.logprob;
  // The legacy API always includes the chosen token ("up to logprobs + 1 elements").
  top[token_name(t.token_id)] = t.logprob;
  return top;
}

Json Generation::logprobs_json(Choice& c, const std::vector<TokenOutput>& tokens) const {
  auto piece = [&](int32_t id) { return tokenizer_.token_to_piece(id, /*render_special=*/true); };
  if (kind_ == Kind::kChat) {
    Json content = Json::array();
    for (const TokenOutput& t : tokens) {
      const std::string p = piece(t.token_id);
      Json top = Json::array();
      for (const TokenLogprob& alt : t.top) {
        const std::string ap = piece(alt.token_id);
        top.push_back({{"token", token_name(alt.token_id)}, {"logprob", alt.logprob},
                       {"bytes", std::vector<uint8_t>(ap.begin(), ap.end())}});
      }
      content.push_back({{"token", token_name(t.token_id)}, {"logprob", t.logprob},
                         {"bytes", std::vector<uint8_t>(p.begin(), p.end())}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  // Legacy completions: parallel arrays; top_logprobs maps token text to logprob.
  Json lp = {{"tokens", Json::array()}, {"token_logprobs", Json::array()}, {"top_logprobs", Json::array()},
             {"text_offset", Json::array()}};
  for (const TokenOutput& t : tokens) {
    lp["tokens"].push_back(token_name(t.token_id));
    lp["token_logprobs"].push_back(t.logprob);
    lp["top_logprobs"].push_back(legacy_top(t));
    if (!c.offset_decoder) c.offset_decoder.emplace(tokenizer_);
    const size_t added = c.offset_decoder->push(t.token_id).size();
    // Where the token's own text begins: after an earlier token's invalid bytes that it flushed.
    lp["text_offset"].push_back(c.text_offset + static_cast<int64_t>(c.offset_decoder->num_carried_bytes()));
    c.text_offset += static_cast<int64_t>(added);
  }
  return lp;
}

Json Generation::prompt_logprobs_json(Choice& c) const {
  const std::vector<int32_t>& prompt = echo_prompts_[c.prompt_index];
  Json lp = {{"tokens", Json::array()}, {"token_logprobs", Json::array()}, {"top_logprobs", Json::array()},
             {"text_offset", Json::array()}};
  int64_t offset = 0;
  for (size_t i = 0; i < prompt.size(); ++i) {
    const TokenOutput* scored = i > 0 && i - 1 < c.prompt_scores.size() ? &c.prompt_scores[i - 1] : nullptr;
    lp["tokens"].push_back(token_name(prompt[i]));
    lp["token_logprobs"].push_back(scored ? Json(scored->logprob) : Json(nullptr));
    lp["top_logprobs"].push_back(scored ? legacy_top(*scored) : Json(nullptr));
    lp["text_offset"].push_back(offset);
    // The bytes the token adds to the echoed prompt. A text prompt comes back as sent, so a
    // special token written in it counts its text, and the BOS (EOS) the vocabulary adds in
    // front (at the end) is not in it; token ids come back decoded (Tokenizer::decode: control
    // tokens add none). The space an SPM vocabulary puts in front of the text is dropped either way.
    const bool from_text = echo_from_text_[c.prompt_index];
    const bool added_bos = i == 0 && tokenizer_.add_bos() && prompt[i] == tokenizer_.bos_id();
    const bool added_eos = i + 1 == prompt.size() && tokenizer_.add_eos() && prompt[i] == tokenizer_.eos_id();
    const bool framing = from_text && (added_bos || added_eos);
    std::string piece = framing ? std::string() : tokenizer_.token_to_piece(prompt[i], /*render_special=*/from_text);
    const bool at_start = i == 0 || (i == 1 && prompt[0] == tokenizer_.bos_id());
    if (at_start && tokenizer_.strips_leading_space() && piece.starts_with(' ')) piece.erase(0, 1);
    offset += static_cast<int64_t>(piece.size());
  }
  c.text_offset = static_cast<int64_t>(echo_texts_[c.prompt_index].size());  // the completion's follow the echo
  return lp;
}

void Generation::emit_echo(Choice& c, bool finished, std::string& events) {
  if (!echo_ || c.echoed) return;
  if (logprobs_ && !finished && c.prompt_scores.size() + 1 < echo_prompts_[c.prompt_index].size()) return;
  c.echoed = true;
  Json choice = {{"index", c.index}, {"text", utf8_sanitize(echo_texts_[c.prompt_index])}};
  choice["logprobs"] = logprobs_ ? prompt_logprobs_json(c) : Json(nullptr);
  choice["finish_reason"] = nullptr;
  events += chunk(Json::array({std::move(choice)}));
}

std::string Generation::chunk(Json choices) const {
  Json j = {{"id", id_},
            {"object", kind_ == Kind::kChat ? "chat.completion.chunk" : "text_completion"},
            {"created", created_},
            {"model", model_},
            {"system_fingerprint", config_.system_fingerprint},
            {"choices", std::move(choices)}};
  if (include_usage_) j["usage"] = nullptr;
  return "data: " + dump(j) + "\n\n";
}

void Generation::emit_text(Choice& c, const StreamOutput& out, std::string& events) {
  if (kind_ == Kind::kChat && !c.role_sent) {
    c.role_sent = true;
    events += chunk(Json::array({{{"index", c.index},
                                  {"delta", {{"role", "assistant"}, {"content", ""}, {"refusal", nullptr}}},
                                  {"logprobs", nullptr}, {"finish_reason", nullptr}}}));
  }
  const bool with_logprobs = logprobs_ && !out.tokens.empty();
  if (out.text.empty() && !with_logprobs) return;
  Json choice = {{"index", c.index}};
  if (kind_ == Kind::kChat) choice["delta"] = {{"content", utf8_sanitize(out.text)}};
  else choice["text"] = utf8_sanitize(out.text);
  choice["logprobs"] = with_logprobs ? logprobs_json(c, out.tokens) : Json(nullptr);
  choice["finish_reason"] = nullptr;
  events += chunk(Json::array({std::move(choice)}));
}

void Generation::emit_finish(Choice& c, std::string& events) {
  if (c.reason == FinishReason::kError || c.reason == FinishReason::kCancelled) {
    const ApiError e = c.reason == FinishReason::kError
                           ? ApiError::internal(c.error)
                           : ApiError::unavailable("the server shut down before the request finished");
    events += "data: " + e.body() + "\n\n";
    return;
  }
  Json choice = {{"index", c.index}};
  if (kind_ == Kind::kChat) choice["delta"] = Json::object();
  else choice["text"] = "";
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason_json(c.reason);
  events += chunk(Json::array({std::move(choice)}));
}

Json Generation::usage() const {
  int64_t prompt = 0, completion = 0, cached = 0, accepted = 0, rejected = 0;
  for (int32_t n : prompt_lengths_) prompt += n;
  std::vector<bool> counted(prompt_lengths_.size(), false);
  for (const auto& c : choices_) {
    completion += c->metrics.num_output_tokens;
    // Predicted outputs, as OpenAI counts them: the prediction's tokens that appeared in the
    // completion, and the rest of the prediction. Counted on the answer itself, not on the
    // drafts verified (those depend on the draft lengths chosen, so on timing).
    if (!prediction_.empty()) {
      const int64_t from = spec::PredictionProposer::tokens_from_prediction(prediction_, c->output_ids);
      accepted += from;
      rejected += std::max<int64_t>(0, static_cast<int64_t>(prediction_.size()) - from);
    }
    // The first choice of each prompt says how much of it came from the cache (its siblings
    // find the blocks it just computed, which says nothing about the cache before).
    if (!counted[c->prompt_index]) {
      counted[c->prompt_index] = true;
      cached += c->metrics.cached_tokens;
    }
  }
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", cached}}},
          {"completion_tokens_details",
           {{"reasoning_tokens", 0}, {"accepted_prediction_tokens", accepted}, {"rejected_prediction_tokens", rejected}}}};
}

bool Generation::poll(std::string& events) {
  if (done_) return true;
  bool all_finished = true;
  for (auto& cp : choices_) {
    Choice& c = *cp;
    while (!c.finished) {
      std::optional<StreamOutput> out = c.handle->try_next();
      if (!out) break;
      if (echo_ && logprobs_) {
        c.prompt_scores.insert(c.prompt_scores.end(), out->prompt_logprobs.begin(), out->prompt_logprobs.end());
      }
      if (!prediction_.empty()) {
        for (const TokenOutput& t : out->tokens) c.output_ids.push_back(t.token_id);
      }
      if (stream_) {
        emit_echo(c, out->finished, events);
        emit_text(c, *out, events);
      } else {
        c.text += out->text;
        if (logprobs_) c.tokens.insert(c.tokens.end(), out->tokens.begin(), out->tokens.end());
      }
      if (out->finished) {
        c.finished = true;
        c.reason = out->finish_reason;
        c.error = out->error;
        c.metrics = out->metrics;
        if (stream_) emit_finish(c, events);
      }
    }
    all_finished = all_finished && c.finished;
  }
  if (!all_finished) return false;
  done_ = true;
  if (stream_) {
    if (include_usage_) {
      Json j = {{"id", id_},
                {"object", kind_ == Kind::kChat ? "chat.completion.chunk" : "text_completion"},
                {"created", created_},
                {"model", model_},
                {"system_fingerprint", config_.system_fingerprint},
                {"choices", Json::array()},
                {"usage", usage()}};
      events += "data: " + dump(j) + "\n\n";
    }
    events += "data: [DONE]\n\n";
  }
  return true;
}

ApiResult<std::string> Generation::response() {
  for (const auto& c : choices_) {
    if (c->reason == FinishReason::kError) return std::unexpected(ApiError::internal(c->error));
    if (c->reason == FinishReason::kCancelled) {
      return std::unexpected(ApiError::unavailable("the server shut down before the request finished"));
    }
  }
  Json choices = Json::array();
  for (const auto& cp : choices_) {
    Choice& c = *cp;
    Json choice = {{"index", c.index}};
    const std::string text = utf8_sanitize(echo_ ? echo_texts_[c.prompt_index] + c.text : c.text);
    if (kind_ == Kind::kChat) choice["message"] = {{"role", "assistant"}, {"content", text}, {"refusal", nullptr}};
    else choice["text"] = text;
    if (logprobs_ && echo_) {
      Json lp = prompt_logprobs_json(c);
      const Json more = logprobs_json(c, c.tokens);
      for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
        for (const Json& v : more[key]) lp[key].push_back(v);
      }
      choice["logprobs"] = std::move(lp);
    } else {
      choice["logprobs"] = logprobs_ ? logprobs_json(c, c.tokens) : Json(nullptr);
    }
    choice["finish_reason"] = finish_reason_json(c.reason);
    choices.push_back(std::move(choice));
  }
  Json j = {{"id", id_},
            {"object", kind_ == Kind::kChat ? "chat.completion" : "text_completion"},
            {"created", created_},
            {"model", model_},
            {"system_fingerprint", config_.system_fingerprint},
            {"choices", std::move(choices)},
            {"usage", usage()}};
  return dump(j);
}

// ---- OpenAiApi ----

OpenAiApi::OpenAiApi(Engine& engine, const Tokenizer& tokenizer, chat::ChatTemplate chat_template, ApiConfig config)
    : engine_(engine), tokenizer_(tokenizer), chat_template_(std::move(chat_template)), config_(std::move(config)) {
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
    return std::unexpected(ApiError::invalid(
        fmt::format("This model's maximum context length is {} tokens, but the prompt has {} bytes, more than {} "
                    "tokens can hold (at most {} bytes each)",
                    limit, prompt.text.size(), limit, tokenizer_.max_bytes_per_token()),
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
// it compares with, a field it reads) is taken as rendered: Qwen's templates print a default
// system prompt, the same as a system message that repeats it, and drop reasoning_content
// before the last question by design. For any other, rendering again without it and getting
// the same prompt proves it was dropped: a 400, not an answer to another conversation. A render
// that fails without it (a template that checks the order of roles) counts as rendering it.
// One render per such name, each cheap next to the prompt's prefill, and at most
// kMaxUnnamed of each kind: a request naming thousands would cost thousands of renders.
template <typename Render, typename Names>
ApiResult<bool> check_rendered(const Json& messages, const std::string& prompt, Render&& render, Names&& names) {
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
        (content != m.end() && content->is_string() && !content->get<std::string>().empty()) || m.contains("tool_calls");
    if (role == "user" || role == "assistant" || !says_something) continue;
    if (!seen_roles.insert(role).second || names(role)) continue;
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
    if (without.empty()) continue;
    auto other = render(without);
    if (other && *other == prompt) {
      const size_t i = first_index([&](const Json& m) { return m.value("role", std::string()) == role; });
      return std::unexpected(ApiError::invalid(
          fmt::format("'messages[{}]': this model's chat template does not render messages with role '{}', so the "
                      "model would never see them",
                      i, role.substr(0, 100)),
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
  if (!chat_template_.names("developer")) {
    for (Json& m : messages) {
      if (m["role"] == "developer") m["role"] = "system";
    }
  }
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
    SLUICE_API_TRY([[maybe_unused]] bool ok,
                   check_rendered(messages, *prompt, render, [&](const std::string& n) { return chat_template_.names(n); }));
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
  for (size_t i = 0; i < handles->size(); ++i) {
    auto c = std::make_unique<Generation::Choice>();
    c->index = static_cast<int32_t>(i);
    c->prompt_index = prompt_of[i];
    c->handle.emplace(std::move((*handles)[i]));
    g->choices_.push_back(std::move(c));
  }
  return g;
}

ApiResult<std::unique_ptr<Generation>> OpenAiApi::start_completion(const Json& body) const {
  SLUICE_API_TRY(CompletionRequest req, parse_completion_request(body));
  SLUICE_API_TRY([[maybe_unused]] bool ok, check_model(req.params.model));
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> echo_texts;  // echo: a text prompt as sent, token ids decoded
  std::vector<bool> echo_from_text;
  for (const PromptInput& p : req.prompts) {
    // As Hugging Face tokenizers (and so vLLM) do: special tokens written in the text count.
    SLUICE_API_TRY(auto ids, encode(p, /*add_bos=*/true, /*parse_special=*/true, "prompt"));
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
  std::vector<int32_t> ids;
  if (req.is_chat) {
    // The chat request's own rendering (tools and kwargs included), so the count is its prompt_tokens.
    SLUICE_API_TRY(std::string text, render_chat(req.messages, req.tools, req.template_kwargs, req.add_generation_prompt));
    SLUICE_API_TRY(ids, encode({.text = std::move(text)}, req.add_special_tokens, /*parse_special=*/true, "messages"));
  } else {
    SLUICE_API_TRY(ids, encode({.text = req.prompt}, req.add_special_tokens, /*parse_special=*/true, "prompt"));
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
  return Json{{"prompt", tokenizer_.decode(req.tokens)}};
}

}  // namespace sluice::server
