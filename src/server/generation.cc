// Generation: one request's engine output as OpenAI response bodies and server-sent events
// (generation.h).
#include "server/generation.h"

#include <algorithm>
#include <atomic>
#include <random>

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

void Generation::add_choice(int32_t prompt_index, RequestHandle handle) {
  auto c = std::make_unique<Choice>();
  c->index = num_choices();
  c->prompt_index = prompt_index;
  c->handle.emplace(std::move(handle));
  choices_.push_back(std::move(c));
}

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
    std::string body = e.body();
    if (std::ranges::find(error_events_sent_, body) != error_events_sent_.end()) return;
    events += "data: " + body + "\n\n";
    error_events_sent_.push_back(std::move(body));
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

}  // namespace sluice::server
