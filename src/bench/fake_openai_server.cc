#include "bench/fake_openai_server.h"

#include <algorithm>

namespace sluice::bench::testing {
namespace {

namespace net = boost::asio;
using http::testing::ReceivedRequest;
using http::testing::TestExchange;
using namespace std::chrono_literals;

int32_t count_words(const std::string& s) {
  return s.empty() ? 0 : static_cast<int32_t>(std::count(s.begin(), s.end(), ' ')) + 1;
}

}  // namespace

net::awaitable<void> FakeOpenAi::handle(const ReceivedRequest& r, TestExchange& ex) {
  if (r.method == "GET" && r.target == "/v1/models") {
    co_await ex.respond(200, R"({"object":"list","data":[{"id":"fake-model","object":"model"}]})");
    co_return;
  }
  const bool chat = r.target == "/v1/chat/completions";
  if (r.method != "POST" || (!chat && r.target != "/v1/completions")) {
    co_await ex.respond(404, R"({"error":{"message":"no such endpoint"}})");
    co_return;
  }
  const nlohmann::json body = nlohmann::json::parse(r.body, nullptr, false);
  if (body.is_discarded()) {
    co_await ex.respond(400, R"({"error":{"message":"the body is not JSON"}})");
    co_return;
  }
  int arrival = 0;
  {
    MutexLock lock(mu_);
    bodies_.push_back(body);
    arrival = static_cast<int>(bodies_.size());
    max_in_flight_ = std::max(max_in_flight_, ++in_flight_);
  }
  co_await respond(body, chat, arrival, ex);
  MutexLock lock(mu_);
  --in_flight_;
}

net::awaitable<void> FakeOpenAi::respond(const nlohmann::json& body, bool chat, int arrival, TestExchange& ex) {
  if (behaviour_.fail_all_with > 0) {
    nlohmann::json error;  // built apart: GCC 12 cannot keep an initializer list across co_await
    error["error"]["message"] = behaviour_.fail_message;
    const std::string text = error.dump();
    co_await ex.respond(behaviour_.fail_all_with, text);
    co_return;
  }
  if (behaviour_.reject_every > 0 && arrival % behaviour_.reject_every == 0) {
    co_await ex.respond(429, R"({"error":{"message":"queue is full","type":"overloaded"}})");
    co_return;
  }
  int32_t prompt_tokens = 0;
  if (chat) {
    for (const auto& m : body["messages"]) prompt_tokens += count_words(m["content"].get<std::string>());
  } else if (body["prompt"].is_array()) {
    prompt_tokens = static_cast<int32_t>(body["prompt"].size());
  } else {
    prompt_tokens = count_words(body["prompt"].get<std::string>());
  }
  const int max_tokens = body["max_tokens"].get<int>();
  if (behaviour_.no_stream) {
    co_await ex.respond(200, R"({"choices":[{"text":"all at once","finish_reason":"length"}]})");
    co_return;
  }
  co_await ex.begin_chunked(200, "text/event-stream");
  if (behaviour_.hang) {
    co_await ex.sleep(10s);  // cut short when the server is destroyed
    co_return;
  }
  const std::string eol = chat ? "\r\n" : "\n";  // both line ends, one per API
  if (behaviour_.done_only) {
    co_await ex.chunk("data: [DONE]" + eol + eol);
    co_await ex.end_chunked();
    co_return;
  }
  if (chat) co_await ex.chunk(R"(data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]})" + eol + eol);
  std::string answer;
  for (int i = 0; i < max_tokens; ++i) {
    if (behaviour_.drop_every > 0 && arrival % behaviour_.drop_every == 0 && i == 2) {
      ex.close();
      co_return;
    }
    if (behaviour_.error_event && i == 1) {
      co_await ex.chunk(R"(data: {"error":{"message":"out of KV blocks","code":500}})" + eol + eol);
      co_await ex.chunk("data: [DONE]" + eol + eol);
      co_await ex.end_chunked();
      co_return;
    }
    const std::string piece = fmt::format("{}w{}", i == 0 ? "" : " ", i);
    answer += piece;
    nlohmann::json chunk = {{"choices", {chat ? nlohmann::json{{"index", 0}, {"delta", {{"content", piece}}}}
                                              : nlohmann::json{{"index", 0}, {"text", piece}}}}};
    if (i + 1 == max_tokens) chunk["choices"][0]["finish_reason"] = "length";
    const std::string event = "data: " + chunk.dump() + eol + eol;
    // Odd tokens come as two chunks cut mid-event, as a proxy or a slow network may cut them.
    if (i % 2 == 1) {
      co_await ex.chunk(event.substr(0, event.size() / 2));
      co_await ex.chunk(event.substr(event.size() / 2));
    } else {
      co_await ex.chunk(event);
    }
    co_await ex.sleep(1ms);
  }
  nlohmann::json usage = {{"prompt_tokens", prompt_tokens}, {"completion_tokens", max_tokens},
                          {"total_tokens", prompt_tokens + max_tokens}};
  if (behaviour_.report_cached) usage["prompt_tokens_details"] = {{"cached_tokens", prompt_tokens / 4}};
  const nlohmann::json last = {{"choices", nlohmann::json::array()}, {"usage", usage}};
  co_await ex.chunk(": a comment line, as some servers send to keep the connection alive" + eol + eol);
  co_await ex.chunk("data: " + last.dump() + eol + eol + "data: [DONE]" + eol + eol);
  co_await ex.end_chunked();
  MutexLock lock(mu_);
  answers_.insert(answer);
}

}  // namespace sluice::bench::testing
