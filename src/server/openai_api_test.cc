// The OpenAI API over HTTP, in-process: what each request may ask and how refusals and answers
// are shaped (field ranges, prompts over the context, chat messages and tools the template
// drops, chunk ids and timestamps, tokenize). The transport itself is in server_test.cc.
#include <atomic>
#include <chrono>
#include <set>

#include "server/server_test_fixture.h"

namespace sluice::server {
namespace {

using namespace server_testing;

// A JSON number outside a double's range, in a known or an unknown field, was an uncaught
// nlohmann::json::out_of_range that ended the process.
TEST_F(ServerTest, NumbersOutOfRangeAre400s) {
  for (const char* body : {R"({"prompt": "x", "max_tokens": 1e400})", R"({"prompt": "x", "whatever": -1e400})",
                           R"({"messages": [{"role": "user", "content": "x"}], "n": 1)" "0000000000000000000000000000000"
                           "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
                           "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
                           "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000e9}"}) {
    const std::string route = std::string_view(body).find("messages") != std::string_view::npos ? "/v1/chat/completions"
                                                                                                 : "/v1/completions";
    const std::string r = exchange(post(route, body));
    EXPECT_TRUE(r.starts_with("HTTP/1.1 400")) << r;
    EXPECT_NE(r.find("number overflow"), std::string::npos) << r;
  }
  expect_healthy();
}

TEST_F(ServerTest, PromptThatCannotFitIsRefusedBeforeTokenizing) {
  ServerConfig sc;
  sc.max_body_bytes = 16 << 20;
  auto big = make_server(sc);
  const int64_t limit = engine_->max_sequence_tokens();
  const int64_t bytes = limit * loaded_.tokenizer->max_bytes_per_token() + 1;
  const std::string r = exchange(post("/v1/completions", R"({"prompt": ")" + std::string(bytes, 'a') + R"("})"),
                                 big->port());
  EXPECT_TRUE(r.starts_with("HTTP/1.1 400")) << r.substr(0, 300);
  EXPECT_NE(r.find(fmt::format("the prompt has {} bytes, more than {} tokens can hold", bytes, limit)),
            std::string::npos)
      << body_of(r);
  EXPECT_NE(r.find(R"("param":"prompt")"), std::string::npos);
  // One byte less still tokenizes (and is refused with its token count).
  const std::string r2 = exchange(post("/v1/completions", R"({"prompt": ")" + std::string(bytes - 1, 'a') + R"("})"),
                                  big->port());
  EXPECT_NE(r2.find("but the prompt has"), std::string::npos) << body_of(r2);
  EXPECT_EQ(r2.find("bytes, more than"), std::string::npos) << body_of(r2);
  // A prediction past that bound is named as the prediction, not as the prompt.
  const std::string p = exchange(post("/v1/completions", R"({"prompt": "x", "prediction": {"type": "content", "content": ")" +
                                                             std::string(bytes, 'a') + R"("}})"),
                                 big->port());
  EXPECT_TRUE(p.starts_with("HTTP/1.1 400")) << p.substr(0, 300);
  EXPECT_NE(p.find(fmt::format("the prediction has {} bytes", bytes)), std::string::npos) << body_of(p);
  EXPECT_NE(p.find(R"("param":"prediction")"), std::string::npos) << body_of(p);
  // /tokenize is how a client finds that a text is too long: it counts it, whatever its length
  // (the body's limit bounds the work), and says the context beside the count.
  const std::string t = exchange(post("/tokenize", R"({"prompt": ")" + std::string(bytes, 'a') + R"("})"), big->port());
  ASSERT_TRUE(t.starts_with("HTTP/1.1 200")) << t.substr(0, 300);
  const Json counted = Json::parse(body_of(t));
  EXPECT_GT(counted["count"].get<int64_t>(), limit) << counted["count"];
  EXPECT_EQ(counted["max_model_len"], limit);
  big->request_shutdown();
  big->run_until_shutdown();
}

TEST_F(ServerTest, MoreChoicesThanTheQueueHoldsIsA400) {
  // max_queued_requests is 2: n = 3 can never be admitted; a retry would not help.
  const std::string r = exchange(post("/v1/completions", R"({"prompt": "x", "n": 3, "max_tokens": 1})"));
  EXPECT_TRUE(r.starts_with("HTTP/1.1 400")) << r;
  EXPECT_NE(r.find("more than the server queues at once (--max-queued-requests 2)"), std::string::npos) << r;
  EXPECT_NE(r.find(R"("param":"n")"), std::string::npos) << r;
}

// /detokenize writes control tokens as their text, so a prompt with them comes back whole.
TEST_F(ServerTest, DetokenizeKeepsControlTokens) {
  const Tokenizer& tok = *loaded_.tokenizer;
  const std::string bos = tok.decode(std::vector<int32_t>{tok.bos_id()}, /*render_special=*/true);
  ASSERT_FALSE(bos.empty());
  const Json ids = Json::parse(body_of(exchange(post("/tokenize", Json{{"prompt", bos + "hi"}}.dump()))))["tokens"];
  ASSERT_EQ(ids[0], tok.bos_id()) << ids;
  const Json back = Json::parse(body_of(exchange(post("/detokenize", Json{{"tokens", ids}}.dump()))));
  EXPECT_EQ(back["prompt"], bos + "hi") << back;
}

TEST_F(ServerTest, TokenizeCountsWhatTheChatRequestCounts) {
  // A template that renders the tools, over the same engine.
  auto tmpl = chat::ChatTemplate::parse(
      "{% if tools %}{{ tools | tojson }}{% endif %}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
      "{% if add_generation_prompt %}<assistant>{% endif %}");
  ASSERT_TRUE(tmpl) << tmpl.error().message();
  OpenAiApi api(*engine_, *loaded_.tokenizer, std::move(*tmpl), ApiConfig{.model_name = "m"});
  ServerConfig sc;
  sc.port = 0;
  auto srv = HttpServer::create(api, sc);
  ASSERT_TRUE(srv);
  (*srv)->start();
  const uint16_t port = (*srv)->port();
  const std::string messages = R"("messages": [{"role": "user", "content": "what is the weather?"}])";
  const std::string tools =
      R"("tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}])";
  const Json t = Json::parse(body_of(exchange(post("/tokenize", "{" + messages + ", " + tools + "}"), port)));
  const Json plain = Json::parse(body_of(exchange(post("/tokenize", "{" + messages + "}"), port)));
  const Json chat = Json::parse(body_of(
      exchange(post("/v1/chat/completions", "{" + messages + ", " + tools + R"(, "max_tokens": 1})"), port)));
  EXPECT_EQ(t["count"], chat["usage"]["prompt_tokens"]) << t << "\n" << chat;
  EXPECT_GT(t["count"].get<int>(), plain["count"].get<int>() + 10);
  // tool_choice "none" leaves the tools out of the prompt, in both.
  const Json none = Json::parse(
      body_of(exchange(post("/tokenize", "{" + messages + ", " + tools + R"(, "tool_choice": "none"})"), port)));
  EXPECT_EQ(none["count"], plain["count"]);
  const Json chat_none = Json::parse(body_of(exchange(
      post("/v1/chat/completions", "{" + messages + ", " + tools + R"(, "tool_choice": "none", "max_tokens": 1})"), port)));
  EXPECT_EQ(chat_none["usage"]["prompt_tokens"], plain["count"]);
  (*srv)->request_shutdown();
  (*srv)->run_until_shutdown();
}

// One `created` for every chunk of a response, read once when it starts: with a clock that moves
// a second at each reading, a streamed answer's chunks (the usage chunk too) still agree.
TEST_F(ServerTest, EveryChunkOfAResponseHasItsOneCreated) {
  auto tmpl = chat::ChatTemplate::parse(chat::default_chatml_template());
  ASSERT_TRUE(tmpl);
  std::atomic<int64_t> seconds{1'700'000'000};
  ApiConfig config{.model_name = "m"};
  config.now = [&] { return std::chrono::system_clock::time_point(std::chrono::seconds(seconds++)); };
  OpenAiApi api(*engine_, *loaded_.tokenizer, std::move(*tmpl), config);
  ServerConfig sc;
  sc.port = 0;
  auto srv = HttpServer::create(api, sc);
  ASSERT_TRUE(srv);
  (*srv)->start();
  for (const char* body : {R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stream": true,
                               "ignore_eos": true, "stream_options": {"include_usage": true}})",
                           R"({"prompt": "hi", "max_tokens": 8, "n": 2, "stream": true, "ignore_eos": true})"}) {
    const bool chat = std::string_view(body).find("messages") != std::string_view::npos;
    const std::string sse = body_of(exchange(post(chat ? "/v1/chat/completions" : "/v1/completions", body),
                                             (*srv)->port()));
    std::set<int64_t> created;
    int chunks = 0;
    for (size_t at = sse.find("data: {"); at != std::string::npos; at = sse.find("data: {", at + 1)) {
      const Json chunk = Json::parse(sse.substr(at + 6, sse.find('\n', at) - at - 6));
      created.insert(chunk["created"].get<int64_t>());
      ++chunks;
    }
    EXPECT_GE(chunks, 2) << sse;  // tokens since the last read share a chunk: how many varies
    EXPECT_EQ(created.size(), 1u) << sse;
  }
  EXPECT_GT(seconds.load(), 1'700'000'001);  // the clock was read: this test could tell
  (*srv)->request_shutdown();
  (*srv)->run_until_shutdown();
}

TEST_F(ServerTest, PromptTokenOutsideTheVocabularyNamesThePrompt) {
  const std::string r = exchange(post("/v1/completions", R"({"prompt": [1, 999999], "max_tokens": 1})"));
  EXPECT_TRUE(r.starts_with("HTTP/1.1 400")) << r;
  EXPECT_NE(r.find("'prompt' token 999999 (at index 1) is outside the vocabulary"), std::string::npos) << r;
  EXPECT_NE(r.find(R"("param":"prompt")"), std::string::npos) << r;
  // In a batch, the prompt by its index.
  const std::string batch = exchange(post("/v1/completions", R"({"prompt": [[1, 2], [3, 999999]], "max_tokens": 1})"));
  EXPECT_NE(batch.find("'prompt[1]' token 999999 (at index 1) is outside the vocabulary"), std::string::npos) << batch;
  EXPECT_NE(batch.find(R"("param":"prompt[1]")"), std::string::npos) << batch;
}

// The fixture's template (ChatML) renders neither tools nor tool calls: a request with them is
// refused rather than answered as if they were not there; tool_choice "none" leaves tools out.
TEST_F(ServerTest, ToolsATemplateCannotRenderAreRefused) {
  const std::string tools =
      R"("tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}])";
  const std::string messages = R"("messages": [{"role": "user", "content": "weather?"}])";
  for (const std::string path : {"/v1/chat/completions", "/tokenize"}) {
    const std::string extra = path == "/tokenize" ? "" : R"(, "max_tokens": 1)";
    const std::string r = exchange(post(path, "{" + messages + ", " + tools + extra + "}"));
    EXPECT_TRUE(r.starts_with("HTTP/1.1 400")) << path << ": " << r;
    EXPECT_NE(r.find("does not render tools"), std::string::npos) << r;
    EXPECT_NE(r.find(R"("param":"tools")"), std::string::npos) << r;
  }
  const std::string none = exchange(post("/v1/chat/completions",
      "{" + messages + ", " + tools + R"(, "tool_choice": "none", "max_tokens": 1})"));
  EXPECT_TRUE(none.starts_with("HTTP/1.1 200")) << none;
  const std::string call = exchange(post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "w?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
       "function": {"name": "get_weather", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "sunny"}], "max_tokens": 1})"));
  EXPECT_TRUE(call.starts_with("HTTP/1.1 400")) << call;
  EXPECT_NE(call.find("'messages[1].tool_calls': this model's chat template does not render tool calls"),
            std::string::npos) << call;
  wait_engine_idle();
}

// A role or message field the template never renders would leave the prompt without a word:
// each is refused, found by rendering without it. "developer" is "system" where the template
// does not know it.
TEST_F(ServerTest, MessagesTheTemplateWouldDropAreRefused) {
  auto api_with = [&](std::string_view source) {
    auto tmpl = chat::ChatTemplate::parse(source);
    EXPECT_TRUE(tmpl) << tmpl.error().message();
    return std::make_unique<OpenAiApi>(*engine_, *loaded_.tokenizer, std::move(*tmpl), ApiConfig{.model_name = "m"});
  };
  auto outcome = [](const OpenAiApi& api, std::string_view messages) {
    auto r = api.tokenize(Json::parse(fmt::format(R"({{"messages": {}}})", messages)));
    return r ? (*r)["tokens"].dump() : r.error().message;
  };
  // Phi-3's way: a branch per known role, nothing for the others.
  const auto known_roles = api_with(
      "{% for m in messages %}{% if m.role == 'user' %}<u>{{ m.content }}{% elif m.role == 'assistant' %}<a>{{ m.content }}"
      "{% elif m.role == 'system' %}<s>{{ m.content }}{% endif %}{% endfor %}");
  const std::string system = outcome(*known_roles, R"([{"role": "system", "content": "be brief"}, {"role": "user", "content": "x"}])");
  ASSERT_TRUE(system.starts_with("[")) << system;
  EXPECT_EQ(outcome(*known_roles, R"([{"role": "developer", "content": "be brief"}, {"role": "user", "content": "x"}])"), system);
  EXPECT_EQ(outcome(*known_roles, R"([{"role": "user", "content": "x"}, {"role": "tool", "content": "sunny"}])"),
            "'messages[1]': this model's chat template does not render messages with role 'tool', so the model would "
            "never see them");
  EXPECT_EQ(outcome(*known_roles, R"([{"role": "user", "content": "x", "name": "alice"}])"),
            "'messages[0].name': this model's chat template does not render a message's 'name', so the model would "
            "never see it");
  EXPECT_EQ(outcome(*known_roles, R"([{"role": "user", "content": "x"}, {"role": "user", "content": "y", "foo": 1}])"),
            "'messages[1].foo': this model's chat template does not render a message's 'foo', so the model would never "
            "see it");
  // A role that every message has: nothing would be left without it, so its text is changed
  // instead (with a template that reads messages[0], as Qwen's, and one that does not).
  const std::string wizard =
      "'messages[0]': this model's chat template does not render messages with role 'wizard', so the model would "
      "never see them";
  EXPECT_EQ(outcome(*known_roles, R"([{"role": "wizard", "content": "hi"}])"), wizard);
  const auto reads_first = api_with(
      "{% if messages[0].role == 'system' %}<s>{{ messages[0].content }}{% else %}<s>default{% endif %}"
      "{% for m in messages %}{% if m.role == 'user' %}<u>{{ m.content }}{% elif m.role == 'assistant' %}<a>"
      "{{ m.content }}{% endif %}{% endfor %}");
  EXPECT_EQ(outcome(*reads_first, R"([{"role": "wizard", "content": "hi"}, {"role": "wizard", "content": "ho"}])"), wizard);
  EXPECT_TRUE(outcome(*reads_first, R"([{"role": "user", "content": "hi"}])").starts_with("["));
  // One with no place for system messages: a developer message, sent as one, is named as sent.
  const auto user_only = api_with(
      "{% for m in messages %}{% if m.role == 'user' %}<u>{{ m.content }}{% elif m.role == 'assistant' %}<a>"
      "{{ m.content }}{% endif %}{% endfor %}");
  EXPECT_EQ(outcome(*user_only, R"([{"role": "developer", "content": "be brief"}, {"role": "user", "content": "x"}])"),
            "'messages[0]': this model's chat template does not render messages with role 'system' (the 'developer' "
            "message is sent as one), so the model would never see them");
  // A role the template names only as an attribute or in prose is not one it renders (Qwen2.5's
  // says "function" in its tool-call code and text, and drops a "function" message).
  const auto prose = api_with(
      "{% for m in messages %}{% if m.role == 'user' %}<u>{{ m.content }}{% elif m.role == 'assistant' %}<a>"
      "{{ m.content }}{% if m.tool_calls %}{{ m.tool_calls[0].function.name }}{% endif %}{% endif %}{% endfor %}"
      "{{ 'You may call a function' }}");
  EXPECT_EQ(outcome(*prose, R"([{"role": "user", "content": "x"}, {"role": "function", "content": "42"}])"),
            "'messages[1]': this model's chat template does not render messages with role 'function', so the model "
            "would never see them");
  // ... nor one quoted inside a longer literal (Hermes' tool prompt: '{"type": "function", ...').
  const auto inside = api_with(
      "{% for m in messages %}{% if m.role == 'user' %}<u>{{ m.content }}{% endif %}{% endfor %}"
      "{{ '{\"type\": \"function\"}' }}");
  EXPECT_EQ(outcome(*inside, R"([{"role": "user", "content": "x"}, {"role": "function", "content": "42"}])"),
            "'messages[1]': this model's chat template does not render messages with role 'function', so the model "
            "would never see them");
  // An empty system message says nothing, dropped or not; ids are never required to show.
  EXPECT_TRUE(outcome(*known_roles, R"([{"role": "tool", "content": ""}, {"role": "user", "content": "x"}])").starts_with("["));
  // A template that renders names and any role takes them.
  const auto generic = api_with(
      "{% for m in messages %}{{ m.role }}{% if m.name %}({{ m.name }}){% endif %}: {{ m.content }}\n{% endfor %}");
  EXPECT_TRUE(outcome(*generic, R"([{"role": "ipython", "content": "42"}, {"role": "user", "content": "x", "name": "alice"}])")
                  .starts_with("["));
  // ... also when it is the only role sent (its text changed shows in the prompt).
  EXPECT_TRUE(outcome(*generic, R"([{"role": "ipython", "content": "42"}])").starts_with("["));
  // One that knows "developer" gets it as sent.
  const auto developer = api_with(
      "{% for m in messages %}{% if m.role == 'developer' %}<d>{% endif %}{{ m.content }}{% endfor %}");
  EXPECT_NE(outcome(*developer, R"([{"role": "developer", "content": "x"}])"),
            outcome(*developer, R"([{"role": "system", "content": "x"}])"));
  // Qwen's way: a default system prompt when none is sent, so a system message repeating it
  // renders the same prompt as none. The template names the role: it is rendered, not refused.
  const auto with_default = api_with(
      "{% if messages[0].role == 'system' %}{{ messages[0].content }}{% set rest = messages[1:] %}"
      "{% else %}Be helpful.{% set rest = messages %}{% endif %}{% for m in rest %}<{{ m.role }}>{{ m.content }}{% endfor %}");
  EXPECT_EQ(outcome(*with_default, R"([{"role": "system", "content": "Be helpful."}, {"role": "user", "content": "x"}])"),
            outcome(*with_default, R"([{"role": "user", "content": "x"}])"));
  // Each unnamed role or field costs a render: past 8 of either, the request is refused.
  std::string roles = "[";
  for (int i = 0; i < 9; ++i) roles += fmt::format(R"({{"role": "r{}", "content": "x"}}, )", i);
  EXPECT_EQ(outcome(*generic, roles + R"({"role": "user", "content": "x"}])"),
            "the messages hold more than 8 roles that this model's chat template does not name");
  std::string fields = R"([{"role": "user", "content": "x")";
  for (int i = 0; i < 9; ++i) fields += fmt::format(R"(, "f{}": 1)", i);
  EXPECT_EQ(outcome(*generic, fields + "}]"),
            "the messages hold more than 8 fields that this model's chat template does not name");
}

TEST_F(ServerTest, OpenAiShapes) {
  const Json chat = Json::parse(body_of(exchange(post(
      "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})"))));
  EXPECT_TRUE(chat["choices"][0]["message"].contains("refusal"));
  EXPECT_TRUE(chat["choices"][0]["message"]["refusal"].is_null());
  EXPECT_EQ(chat["usage"]["completion_tokens_details"]["reasoning_tokens"], 0);

  const std::string unknown = exchange(post("/v1/completions", R"({"model": "nope", "prompt": "x"})"));
  EXPECT_TRUE(unknown.starts_with("HTTP/1.1 404")) << unknown;
  const Json e = Json::parse(body_of(unknown));
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["code"], "model_not_found");
  EXPECT_EQ(e["error"]["param"], "model");

  const std::string model = get("/v1/models/m");
  EXPECT_TRUE(model.starts_with("HTTP/1.1 200")) << model;
  EXPECT_EQ(Json::parse(body_of(model))["id"], "m");
  const std::string missing = get("/v1/models/other%2Fmodel");
  EXPECT_TRUE(missing.starts_with("HTTP/1.1 404")) << missing;
  EXPECT_NE(missing.find("The model 'other/model' does not exist"), std::string::npos) << missing;

  const std::string head = exchange("HEAD /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(head.starts_with("HTTP/1.1 200")) << head;
  EXPECT_NE(head.find("Content-Length: 15\r\n"), std::string::npos) << head;
  EXPECT_EQ(body_of(head), "");
  // A HEAD answer never has a body, errors included (the client would take it for the next response).
  const std::string head405 = exchange("HEAD /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(head405.starts_with("HTTP/1.1 405")) << head405;
  EXPECT_EQ(body_of(head405), "");
  const std::string head404 = exchange("HEAD /nowhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(head404.starts_with("HTTP/1.1 404")) << head404;
  EXPECT_EQ(body_of(head404), "");
}

TEST_F(ServerTest, ApiKeyErrorsAreOpenAiShaped) {
  ServerConfig sc;
  sc.api_key = "k";
  auto srv = make_server(sc);
  const std::string r = exchange(
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\nContent-Length: 2\r\n"
      "Connection: close\r\n\r\n{}",
      srv->port());
  EXPECT_TRUE(r.starts_with("HTTP/1.1 401")) << r;
  EXPECT_NE(r.find("WWW-Authenticate: Bearer\r\n"), std::string::npos) << r;
  const Json e = Json::parse(body_of(r));
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["code"], "invalid_api_key");
  // The scheme is case-insensitive, as RFC 9110 has it.
  for (const char* auth : {"bearer k", "BEARER  k"}) {
    const std::string ok = exchange(fmt::format("GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: {}\r\n"
                                                "Connection: close\r\n\r\n", auth),
                                    srv->port());
    EXPECT_TRUE(ok.starts_with("HTTP/1.1 200")) << auth << ": " << ok;
  }
  EXPECT_TRUE(exchange("GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Basic k\r\nConnection: close\r\n\r\n",
                       srv->port()).starts_with("HTTP/1.1 401"));
  srv->request_shutdown();
  srv->run_until_shutdown();
}

}  // namespace
}  // namespace sluice::server
