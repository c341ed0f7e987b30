#include "eval/client.h"

#include <algorithm>
#include <cstdlib>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "common/http_client.h"
#include "common/url.h"

namespace sluice::eval {

Result<Json> build_body(const Provider& provider, const std::string& text, const Json& messages, const Json& params,
                        std::optional<int64_t> seed) {
  Json body = Json::object();
  if (!provider.model.empty()) body["model"] = provider.model;
  if (provider.api == "chat") {
    body["messages"] = messages.is_array() ? messages : Json::array({{{"role", "user"}, {"content", text}}});
  } else {
    if (messages.is_array()) {
      return Error(StatusCode::kInvalid, "provider '{}' is a completion endpoint; a chat prompt (messages) needs a "
                   "chat provider", provider.label);
    }
    body["prompt"] = text;
  }
  for (auto it = provider.params.begin(); it != provider.params.end(); ++it) body[it.key()] = it.value();
  if (params.is_object()) {
    for (auto it = params.begin(); it != params.end(); ++it) body[it.key()] = it.value();
  }
  if (seed) body["seed"] = *seed;
  return body;
}

namespace {

// text_offset counts bytes on sluice and llama.cpp, characters (code points) on OpenAI and vLLM.
// On a text that is not all ASCII the two differ: the unit under which more tokens' texts sit at
// their offsets is taken, and code point offsets are turned into bytes (ties: bytes).
void offsets_to_bytes(Reply& r) {
  const std::string& text = r.text;
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) return;
  std::vector<int64_t> byte_of{0};  // byte_of[k]: the byte where code point k starts
  for (size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80 && i > 0) byte_of.push_back(static_cast<int64_t>(i));
  }
  byte_of.push_back(static_cast<int64_t>(text.size()));
  auto matches = [&](auto to_byte) {
    int64_t n = 0;
    for (size_t i = 0; i < r.tokens.size(); ++i) {
      const int64_t at = to_byte(r.text_offsets[i]);
      if (at < 0 || r.tokens[i].empty()) continue;
      n += text.compare(static_cast<size_t>(at), r.tokens[i].size(), r.tokens[i]) == 0;
    }
    return n;
  };
  auto bytes = [&](int64_t o) { return o >= 0 && o <= static_cast<int64_t>(text.size()) ? o : -1; };
  auto chars = [&](int64_t o) { return o >= 0 && o < static_cast<int64_t>(byte_of.size()) ? byte_of[o] : -1; };
  if (matches(chars) > matches(bytes)) {
    for (int64_t& o : r.text_offsets) o = chars(o);
  }
}

}  // namespace

Result<Reply> parse_reply(const Json& body, const std::string& api) {
  Reply r;
  r.body = body;
  if (!body.is_object() || !body.contains("choices") || !body["choices"].is_array() || body["choices"].empty()) {
    return Error("the answer has no choices: {}", body.dump().substr(0, 200));
  }
  const Json& c = body["choices"][0];
  if (api == "chat") {
    if (!c.contains("message") || !c["message"].is_object()) return Error("choices[0] has no message");
    const Json& content = c["message"].value("content", Json());
    r.text = content.is_string() ? content.get<std::string>() : "";
  } else {
    if (!c.contains("text") || !c["text"].is_string()) return Error("choices[0] has no text");
    r.text = c["text"];
  }
  if (c.contains("finish_reason") && c["finish_reason"].is_string()) r.finish_reason = c["finish_reason"];
  if (body.contains("system_fingerprint") && body["system_fingerprint"].is_string()) {
    r.system_fingerprint = body["system_fingerprint"];
  }
  if (body.contains("usage") && body["usage"].is_object()) {
    const Json& u = body["usage"];
    if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer()) r.prompt_tokens = u["prompt_tokens"];
    if (u.contains("completion_tokens") && u["completion_tokens"].is_number_integer()) {
      r.completion_tokens = u["completion_tokens"];
    }
  }
  const Json lp = c.value("logprobs", Json());
  if (lp.is_object() && lp.contains("token_logprobs") && lp["token_logprobs"].is_array()) {
    const Json& toks = lp.value("tokens", Json::array());
    const Json& offs = lp.value("text_offset", Json::array());
    for (size_t i = 0; i < lp["token_logprobs"].size(); ++i) {
      const Json& v = lp["token_logprobs"][i];
      r.token_logprobs.push_back(v.is_number() ? std::optional<double>(v.get<double>()) : std::nullopt);
      r.tokens.push_back(i < toks.size() && toks[i].is_string() ? toks[i].get<std::string>() : "");
      r.text_offsets.push_back(i < offs.size() && offs[i].is_number_integer() ? offs[i].get<int64_t>() : -1);
    }
    offsets_to_bytes(r);
  } else if (lp.is_object() && lp.contains("content") && lp["content"].is_array()) {
    int64_t offset = 0;
    for (const Json& t : lp["content"]) {
      if (!t.is_object()) continue;
      r.token_logprobs.push_back(t.contains("logprob") && t["logprob"].is_number()
                                     ? std::optional<double>(t["logprob"].get<double>())
                                     : std::nullopt);
      const std::string tok = t.value("token", std::string());
      r.tokens.push_back(tok);
      r.text_offsets.push_back(offset);
      offset += t.contains("bytes") && t["bytes"].is_array() ? static_cast<int64_t>(t["bytes"].size())
                                                               : static_cast<int64_t>(tok.size());
    }
  }
  return r;
}

Result<Reply> call(const Provider& provider, const Json& body, const CallOptions& options) {
  SLUICE_ASSIGN_OR_RETURN(http::Url url, http::parse_url(provider.base_url));
  http::HttpRequest req;
  req.method = "POST";
  req.target = url.target(provider.api == "chat" ? "/chat/completions" : "/completions");
  req.body = body.dump(-1, ' ', false, Json::error_handler_t::replace);
  req.headers.push_back({"Content-Type", "application/json"});
  if (!provider.api_key.empty()) {
    req.headers.push_back({"Authorization", fmt::format("Bearer {}", provider.api_key)});
  } else if (!provider.api_key_env.empty()) {
    if (const char* key = std::getenv(provider.api_key_env.c_str()); key && *key) {
      req.headers.push_back({"Authorization", fmt::format("Bearer {}", key)});
    }
  }
  http::HttpOptions http_options;
  http_options.request_timeout = options.timeout;
  http_options.connect_timeout = std::min(options.timeout, std::chrono::milliseconds(10'000));
  http_options.user_agent = "sluice-eval";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string last_error;
  for (int32_t attempt = 0;; ++attempt) {
    const auto start = std::chrono::steady_clock::now();
    http::HttpResult<http::HttpResponse> resp = http::fetch(url, req, http_options);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (resp) {
      Json j = Json::parse(resp->body, nullptr, false);
      if (j.is_discarded()) return Error("{} answered with a body that is not JSON: {}", provider.base_url, resp->body.substr(0, 200));
      auto reply = parse_reply(j, provider.api);
      if (!reply) return Error(reply.error().with_context(provider.base_url));
      reply->latency_ms = ms;
      reply->attempts = attempt + 1;
      return reply;
    }
    const http::HttpError& e = resp.error();
    // 408 (the server gave up waiting) and 429 are retried as 5xx are; another 4xx is a refusal.
    if (e.kind == http::ErrorKind::kStatus && e.status != 408 && e.status != 429 && e.status < 500) {
      Json j = Json::parse(e.body, nullptr, false);
      std::string message = !j.is_discarded() && j.contains("error") && j["error"].is_object()
                                ? j["error"].value("message", e.body)
                                : e.body.substr(0, 300);
      // A base URL without its /v1 (http://HOST:PORT) reaches no route of an OpenAI server.
      // Only where the URL has no path at all: other APIs' base URLs rightly lack /v1.
      std::string root = provider.base_url;
      while (root.ends_with('/')) root.pop_back();
      const size_t scheme = root.find("://");
      const bool no_path = scheme != std::string::npos && root.find('/', scheme + 3) == std::string::npos;
      return Error(StatusCode::kInvalid, "{} refused the request (HTTP {}): {}{}", provider.base_url, e.status, message,
                   e.status == 404 && no_path ? fmt::format(" (an OpenAI base URL ends in /v1: {}/v1?)", root) : "");
    }
    last_error = e.message;
    if (attempt >= options.max_retries || (!options.retry_transport && e.kind != http::ErrorKind::kStatus)) {
      return Error(StatusCode::kUnavailable, "{} failed after {} attempt{}: {}", provider.base_url, attempt + 1,
                   attempt == 0 ? "" : "s", last_error);
    }
    auto wait = options.backoff * (int64_t{1} << std::min(attempt, 16));
    wait = std::min<std::chrono::milliseconds>(wait, std::chrono::milliseconds(30'000));
    std::uniform_int_distribution<int64_t> jitter(0, wait.count());
    std::this_thread::sleep_for(std::chrono::milliseconds(jitter(rng)));
  }
}

}  // namespace sluice::eval
