#include "bench/stream_request.h"

#include "common/sse.h"

namespace sluice::bench {
namespace {

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

int32_t int_field(const nlohmann::json& object, const char* name) {
  auto it = object.find(name);
  return it != object.end() && it->is_number_integer() ? it->get<int32_t>() : -1;
}

Usage parse_usage(const nlohmann::json& u) {
  Usage usage;
  usage.prompt_tokens = int_field(u, "prompt_tokens");
  usage.completion_tokens = int_field(u, "completion_tokens");
  auto details = u.find("prompt_tokens_details");
  if (details != u.end() && details->is_object()) usage.cached_tokens = int_field(*details, "cached_tokens");
  return usage;
}

// The message of an OpenAI-style error value: {"message": ...} or a bare string.
std::string error_message(const nlohmann::json& e) {
  if (e.is_string()) return e.get<std::string>();
  if (e.is_object() && e.contains("message") && e["message"].is_string()) return e["message"].get<std::string>();
  return e.dump();
}

}  // namespace

double RequestRecord::tpot_s() const {
  if (!ok || ttft_s < 0 || output_tokens < 2) return -1;
  return (e2e_s - ttft_s) / (output_tokens - 1);
}

nlohmann::json record_json(const RequestRecord& r) {
  auto or_null = [](auto v) { return v < 0 ? nlohmann::json() : nlohmann::json(v); };
  nlohmann::json j = {{"request_idx", r.request_idx},
                      {"ok", r.ok},
                      {"start_s", r.start_s},
                      {"ttft_s", or_null(r.ttft_s)},
                      {"tpot_s", or_null(r.tpot_s())},
                      {"e2e_s", r.e2e_s},
                      {"itl_s", r.itl_s},
                      {"num_token_chunks", r.num_token_chunks},
                      {"max_tokens", r.max_tokens},
                      {"expected_prompt_tokens", r.expected_prompt_tokens},
                      {"prompt_tokens", or_null(r.prompt_tokens)},
                      {"output_tokens", r.output_tokens},
                      {"output_tokens_from_usage", r.output_tokens_from_usage},
                      {"cached_tokens", or_null(r.cached_tokens)},
                      {"finish_reason", r.finish_reason}};
  if (r.prefix_idx >= 0) j["prefix_idx"] = r.prefix_idx;
  if (r.session_idx >= 0) j["session_idx"] = r.session_idx, j["turn_idx"] = r.turn_idx;
  if (!r.ok) j["error_kind"] = r.error_kind, j["error"] = r.error;
  return j;
}

nlohmann::json request_body(const ApiSettings& s, const RequestSpec& spec) {
  nlohmann::json body = {{"model", s.model},
                         {"max_tokens", spec.max_tokens},
                         {"temperature", s.temperature},
                         {"stream", true},
                         {"stream_options", {{"include_usage", true}}}};
  // NOTE: ignore_eos is an extension (vLLM, llama.cpp, sluice): it makes the output length exactly
  // max_tokens, which a throughput comparison needs. Servers that reject unknown fields want
  // --no-ignore-eos.
  if (s.ignore_eos) body["ignore_eos"] = true;
  if (s.api == Api::kChat) {
    nlohmann::json messages = nlohmann::json::array();
    for (const ChatMessage& m : spec.messages) messages.push_back({{"role", m.role}, {"content", m.content}});
    body["messages"] = std::move(messages);
  } else if (!spec.prompt_token_ids.empty()) {
    body["prompt"] = spec.prompt_token_ids;
  } else {
    body["prompt"] = spec.prompt_text;
  }
  if (!spec.user.empty()) body["user"] = spec.user;
  body.update(s.extra_body);
  return body;
}

Result<StreamChunk> parse_stream_chunk(std::string_view data, Api api) {
  auto j = nlohmann::json::parse(data, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Error("stream event is not a JSON object: {}", data.substr(0, 200));
  StreamChunk chunk;
  if (auto e = j.find("error"); e != j.end() && !e->is_null()) {
    chunk.error = error_message(*e);
    return chunk;
  }
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) chunk.usage = parse_usage(*u);
  auto choices = j.find("choices");
  if (choices == j.end() || !choices->is_array() || choices->empty() || !(*choices)[0].is_object()) return chunk;
  const nlohmann::json& choice = (*choices)[0];
  const nlohmann::json* holder = &choice;
  if (api == Api::kChat) {
    auto delta = choice.find("delta");
    holder = delta != choice.end() && delta->is_object() ? &*delta : nullptr;
  }
  if (holder != nullptr) {
    for (const char* field : {"text", "content", "reasoning_content"}) {
      auto it = holder->find(field);
      if (it != holder->end() && it->is_string()) chunk.text += it->get<std::string>();
    }
  }
  if (auto f = choice.find("finish_reason"); f != choice.end() && f->is_string()) chunk.finish_reason = *f;
  return chunk;
}

namespace {

// Reads the events of one stream as its pieces arrive, and keeps what the record is made of.
class StreamReader {
 public:
  StreamReader(Api api, std::string target) : api_(api), target_(std::move(target)) {}

  void on_piece(std::string_view piece) {
    sse_.feed(piece, [this](const http::SseEvent& event) { on_event(event); });
  }

  // Fills the timings, token counts and outcome of `r` once the response has ended.
  void finish(const http::HttpResult<http::HttpResponse>& response, Clock::time_point start, RequestRecord& r) const {
    r.num_token_chunks = static_cast<int32_t>(token_times_.size());
    if (!token_times_.empty()) r.ttft_s = seconds(token_times_.front() - start);
    for (size_t i = 1; i < token_times_.size(); ++i) r.itl_s.push_back(seconds(token_times_[i] - token_times_[i - 1]));
    r.finish_reason = finish_reason_;
    r.output_tokens = r.num_token_chunks;
    if (usage_) {
      r.prompt_tokens = usage_->prompt_tokens;
      r.cached_tokens = usage_->cached_tokens;
      if (usage_->completion_tokens >= 0) r.output_tokens = usage_->completion_tokens, r.output_tokens_from_usage = true;
    }
    if (!response) {
      const http::HttpError& e = response.error();
      r.error_kind = e.kind == http::ErrorKind::kStatus ? fmt::format("http_{}", e.status)
                                                        : std::string(http::error_kind_name(e.kind));
      r.error = e.message;
    } else if (response->header("content-type").find("text/event-stream") == std::string_view::npos) {
      r.error_kind = "bad_stream";
      r.error = fmt::format("POST {}: the response is not a stream (Content-Type: '{}')", target_,
                            response->header("content-type"));
    } else if (!error_.empty()) {
      r.error_kind = error_kind_;
      r.error = error_;
    } else if (!done_ && finish_reason_.empty()) {
      r.error_kind = "bad_stream";
      r.error = fmt::format("POST {}: the stream ended without a finish_reason or [DONE]", target_);
    } else if (finish_reason_.empty() && r.output_tokens == 0) {
      r.error_kind = "bad_stream";
      r.error = fmt::format("POST {}: the stream ended with [DONE] before any token or finish_reason", target_);
    } else {
      r.ok = true;
    }
  }

  std::string answer;  // the text of the token chunks

 private:
  void on_event(const http::SseEvent& event) {
    if (done_ || !error_.empty()) return;
    if (event.data == "[DONE]") {
      done_ = true;
      return;
    }
    auto chunk = parse_stream_chunk(event.data, api_);
    if (!chunk) {
      error_kind_ = "bad_stream";
      error_ = fmt::format("POST {}: {}", target_, chunk.error().message());
      return;
    }
    if (!chunk->error.empty()) {
      error_kind_ = "stream_error";
      error_ = fmt::format("POST {}: error in the stream: {}", target_, chunk->error);
      return;
    }
    if (!chunk->text.empty()) {
      token_times_.push_back(Clock::now());
      answer += chunk->text;
    }
    if (!chunk->finish_reason.empty()) finish_reason_ = chunk->finish_reason;
    if (chunk->usage) usage_ = chunk->usage;
  }

  const Api api_;
  const std::string target_;
  http::SseParser sse_;
  std::vector<Clock::time_point> token_times_;  // [num_token_chunks] when each was read
  std::string finish_reason_;
  std::optional<Usage> usage_;
  bool done_ = false;  // [DONE] was read
  std::string error_kind_, error_;
};

}  // namespace

boost::asio::awaitable<RequestOutcome> send_request(http::HttpConnection& connection, const ApiSettings& settings,
                                                    const RequestSpec& spec, Clock::time_point run_start,
                                                    Clock::time_point start) {
  http::HttpRequest request;
  request.method = "POST";
  request.target = settings.url.target(settings.api == Api::kChat ? "/chat/completions" : "/completions");
  request.body = request_body(settings, spec).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  request.headers.push_back({"Accept", "text/event-stream"});
  if (!settings.api_key.empty()) request.headers.push_back({"Authorization", "Bearer " + settings.api_key});

  StreamReader reader(settings.api, request.target);
  // NOTE: the callback is a named variable: see the note on g++ 12 in http_client.h.
  const http::BodyFn on_body = [&reader](std::string_view piece) { reader.on_piece(piece); };
  auto response = co_await connection.request(request, on_body);
  const Clock::time_point end = Clock::now();

  RequestOutcome out;
  RequestRecord& r = out.record;
  r.prefix_idx = spec.prefix_idx;
  r.session_idx = spec.session_idx;
  r.turn_idx = spec.turn_idx;
  r.max_tokens = spec.max_tokens;
  r.expected_prompt_tokens = spec.num_prompt_tokens;
  r.start_s = seconds(start - run_start);
  r.e2e_s = seconds(end - start);
  reader.finish(response, start, r);
  out.answer = std::move(reader.answer);
  co_return out;
}

}  // namespace sluice::bench
