// Generation over HTTP: predicted outputs, and echo with prompt logprobs.
#include "common/test_paths.h"
#include "common/utf8.h"
#include "server/server_test_fixture.h"

namespace sluice::server {
namespace {

using namespace server_testing;

// Predicted outputs over HTTP: the same answer, streamed or not, with the prediction's use in
// usage and /metrics.
// An engine refusal names the request field in `param`: every sampling check's own message,
// and the prompt's.
TEST(EngineErrors, NameTheFieldTheyAreAbout) {
  auto param_of = [](SamplingParams p, bool completion = false) {
    const Status s = p.validate();
    EXPECT_FALSE(s);
    return engine_error_param(s.message(), "messages", completion);
  };
  EXPECT_EQ(param_of({.temperature = 3}), "temperature");
  EXPECT_EQ(param_of({.top_k = -1}), "top_k");
  EXPECT_EQ(param_of({.top_p = 0}), "top_p");
  EXPECT_EQ(param_of({.min_p = 2}), "min_p");
  EXPECT_EQ(param_of({.repetition_penalty = 0}), "repetition_penalty");
  EXPECT_EQ(param_of({.presence_penalty = 3}), "presence_penalty");
  EXPECT_EQ(param_of({.frequency_penalty = 3}), "frequency_penalty");
  EXPECT_EQ(param_of({.top_logprobs = 30}), "top_logprobs");
  EXPECT_EQ(param_of({.top_logprobs = 30}, /*completion=*/true), "logprobs");
  EXPECT_EQ(engine_error_param("the prompt has 90 tokens; the KV cache holds only 64 tokens", "prompt", true), "prompt");
  EXPECT_EQ(engine_error_param("something else", "prompt", true), "");
}

TEST_F(ServerTest, PredictedOutputsChangeNothingButTheUsage) {
  const std::string base = R"({"prompt": "the cat", "max_tokens": 24, "temperature": 0, "ignore_eos": true)";
  const Json plain = Json::parse(body_of(exchange(post("/v1/completions", base + "}"))));
  const std::string text = plain["choices"][0]["text"];
  EXPECT_EQ(plain["usage"]["completion_tokens_details"]["accepted_prediction_tokens"], 0);
  const std::string prediction = R"(, "prediction": {"type": "content", "content": )" + Json(text).dump() + "}";
  const Json predicted = Json::parse(body_of(exchange(post("/v1/completions", base + prediction + "}"))));
  EXPECT_EQ(predicted["choices"][0]["text"], text);
  const Json& details = predicted["usage"]["completion_tokens_details"];
  EXPECT_GT(details["accepted_prediction_tokens"].get<int>(), 0) << predicted.dump();
  // The prediction's use is counted on the answer: the same answer counts the same, whatever
  // was drafted (here nothing).
  const Json off = Json::parse(body_of(exchange(post("/v1/completions", base + prediction + R"(, "speculative": false})"))));
  EXPECT_EQ(off["choices"][0]["text"], text);
  EXPECT_EQ(off["usage"]["completion_tokens_details"], details) << off.dump();
  // Streamed: the deltas make up the same text.
  const std::string sse = body_of(exchange(post("/v1/completions", base + prediction + R"(, "stream": true})")));
  std::string streamed;
  for (size_t at = sse.find("data: {"); at != std::string::npos; at = sse.find("data: {", at + 1)) {
    const size_t end = sse.find("\n\n", at);
    streamed += Json::parse(sse.substr(at + 6, end - at - 6))["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(streamed, text);
  const std::string metrics = get("/metrics");
  EXPECT_NE(metrics.find(R"(sluice_spec_decode_num_accepted_tokens_total{model_name="m",proposer="prediction"} )"),
            std::string::npos) << metrics;
  EXPECT_NE(metrics.find(R"(sluice_spec_decode_num_accepted_tokens_per_pos_total{model_name="m",proposer="prediction",position="0"} )"),
            std::string::npos);
  wait_engine_idle();
}

// An SPM vocabulary (stories260K's) encodes a text with a space in front: a prediction that is
// the answer, leading space and all, counts every answer token accepted and none rejected.
TEST_F(ServerTest, APredictionThatIsTheAnswerIsAcceptedWhole) {
  auto spm = load_model(sluice::testing::shared_dir() + "/models/stories260K.gguf");
  ASSERT_TRUE(spm) << spm.error().message();
  ASSERT_TRUE(spm->tokenizer->strips_leading_space());
  EngineConfig ec;
  ec.kv_cache_bytes = 8 << 20;
  auto engine = Engine::create(*spm->model, *spm->tokenizer, pool_, ec);
  ASSERT_TRUE(engine) << engine.error().message();
  auto tmpl = chat::ChatTemplate::parse(chat::default_chatml_template());
  ASSERT_TRUE(tmpl);
  OpenAiApi api(**engine, *spm->tokenizer, std::move(*tmpl), ApiConfig{.model_name = "m"});
  ServerConfig sc;
  sc.port = 0;
  auto srv = HttpServer::create(api, sc);
  ASSERT_TRUE(srv);
  (*srv)->start();
  // Answers that start with a space (" there was...") and without one (", there was...").
  for (const char* prompt : {"Once upon a time,", "Once upon a time"}) {
    const std::string base = fmt::format(R"({{"prompt": "{}", "max_tokens": 20, "temperature": 0, "ignore_eos": true)",
                                         prompt);
    const Json plain = Json::parse(body_of(exchange(post("/v1/completions", base + "}"), (*srv)->port())));
    const std::string text = plain["choices"][0]["text"];
    const Json predicted = Json::parse(body_of(exchange(
        post("/v1/completions", base + R"(, "prediction": {"type": "content", "content": )" + Json(text).dump() + "}}"),
        (*srv)->port())));
    EXPECT_EQ(predicted["choices"][0]["text"], text);
    const Json& details = predicted["usage"]["completion_tokens_details"];
    EXPECT_EQ(details["accepted_prediction_tokens"], predicted["usage"]["completion_tokens"]) << text << predicted.dump();
    EXPECT_EQ(details["rejected_prediction_tokens"], 0) << text << predicted.dump();
  }
  (*srv)->request_shutdown();
  (*srv)->run_until_shutdown();
}

// JSON mode: response_format json_object gives a JSON object (finish_reason "stop" when it
// closed, "length" for a prefix cut by max_tokens), streamed or not, on both endpoints.
TEST_F(ServerTest, JsonObjectResponseFormatGivesAJsonObject) {
  int num_objects = 0;
  for (int seed = 1; seed <= 4; ++seed) {
    const std::string fields = fmt::format(
        R"("max_tokens": 100, "temperature": 1, "seed": {}, "response_format": {{"type": "json_object"}})", seed);
    const Json chat = Json::parse(body_of(exchange(post("/v1/chat/completions",
        R"({"messages": [{"role": "user", "content": "Answer in JSON."}], )" + fields + "}"))));
    const Json completion = Json::parse(body_of(exchange(post("/v1/completions", R"({"prompt": "JSON:", )" + fields + "}"))));
    const std::string sse = body_of(exchange(post("/v1/completions", R"({"prompt": "JSON:", "stream": true, )" + fields + "}")));
    std::string streamed, streamed_finish;
    for (size_t at = sse.find("data: {"); at != std::string::npos; at = sse.find("data: {", at + 1)) {
      const Json event = Json::parse(sse.substr(at + 6, sse.find("\n\n", at) - at - 6));
      streamed += event["choices"][0]["text"].get<std::string>();
      if (event["choices"][0]["finish_reason"].is_string()) streamed_finish = event["choices"][0]["finish_reason"];
    }
    EXPECT_EQ(streamed, completion["choices"][0]["text"].get<std::string>());
    EXPECT_EQ(streamed_finish, completion["choices"][0]["finish_reason"].get<std::string>());
    for (const auto& [text, finish] : {std::pair{chat["choices"][0]["message"]["content"], chat["choices"][0]["finish_reason"]},
                                       std::pair{completion["choices"][0]["text"], completion["choices"][0]["finish_reason"]}}) {
      ASSERT_TRUE(text.is_string()) << chat.dump() << completion.dump();
      const Json parsed = Json::parse(text.get<std::string>(), nullptr, /*allow_exceptions=*/false);
      if (finish == "stop") {
        EXPECT_TRUE(parsed.is_object()) << text;
        ++num_objects;
      } else {
        EXPECT_EQ(finish, "length");
        EXPECT_TRUE(text.get<std::string>().starts_with("{")) << text;
      }
    }
  }
  EXPECT_GT(num_objects, 0);
  const std::string bad = body_of(exchange(post("/v1/completions",
      R"({"prompt": "x", "min_tokens": 2, "response_format": {"type": "json_object"}})")));
  EXPECT_NE(bad.find("'min_tokens' cannot be combined with a JSON 'response_format'"), std::string::npos) << bad;
  EXPECT_NE(bad.find(R"("param":"min_tokens")"), std::string::npos) << bad;
  // Refused by the API, so not counted as a request the engine could not hold.
  const std::string metrics = get("/metrics");
  EXPECT_NE(metrics.find(R"(sluice_requests_rejected_total{model_name="m",reason="invalid"} 0)"), std::string::npos)
      << metrics;
  wait_engine_idle();
}

// echo + logprobs + max_tokens 0 (the legacy API's way to score a text, what likelihood
// evaluations send): the prompt comes back with each token's logprob, the first one null, and
// those logprobs are the ones generation reported for the same tokens.
TEST_F(ServerTest, EchoScoresThePromptAsGenerationScoredIt) {
  // Generate greedily with token ids as the logprobs' tokens...
  const Json gen = Json::parse(body_of(exchange(post("/v1/completions",
      R"({"prompt": "the cat sat", "max_tokens": 6, "temperature": 0, "ignore_eos": true, "logprobs": 2,
          "return_tokens_as_token_ids": true})"))));
  const Json& glp = gen["choices"][0]["logprobs"];
  ASSERT_EQ(glp["tokens"].size(), 6u) << gen.dump();
  std::vector<int32_t> generated;
  for (const Json& t : glp["tokens"]) {
    const std::string s = t.get<std::string>();
    ASSERT_TRUE(s.starts_with("token_id:")) << s;
    generated.push_back(std::stoi(s.substr(9)));
  }
  for (const auto& [k, v] : glp["top_logprobs"][0].items()) EXPECT_TRUE(k.starts_with("token_id:")) << k;
  // ...then score prompt + output as one prompt of token ids.
  const Json tok = Json::parse(body_of(exchange(post("/tokenize", R"({"prompt": "the cat sat"})"))));
  std::vector<int32_t> ids = tok["tokens"].get<std::vector<int32_t>>();
  const size_t num_prompt = ids.size();
  ids.insert(ids.end(), generated.begin(), generated.end());
  const Json scored = Json::parse(body_of(exchange(post("/v1/completions",
      Json{{"prompt", ids}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 2}, {"temperature", 0}}.dump()))));
  const Json& c = scored["choices"][0];
  EXPECT_EQ(c["finish_reason"], "length");
  EXPECT_EQ(scored["usage"]["completion_tokens"], 0);
  const Json& lp = c["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), ids.size()) << scored.dump();
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_EQ(lp["text_offset"][0], 0);
  for (size_t i = 1; i < ids.size(); ++i) {
    ASSERT_TRUE(lp["token_logprobs"][i].is_number()) << i;
    EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0);
    // The two alternatives, and the token itself where it is not one of them.
    EXPECT_GE(lp["top_logprobs"][i].size(), 2u);
    EXPECT_LE(lp["top_logprobs"][i].size(), 3u);
    EXPECT_GE(lp["text_offset"][i].get<int64_t>(), lp["text_offset"][i - 1].get<int64_t>());
  }
  for (size_t i = 0; i < generated.size(); ++i) {
    EXPECT_EQ(lp["token_logprobs"][num_prompt + i], glp["token_logprobs"][i]) << "generated token " << i;
  }
  // The echoed text is the prompt decoded: the text generation started from, then its output.
  EXPECT_EQ(c["text"].get<std::string>(), "the cat sat" + gen["choices"][0]["text"].get<std::string>());

  // echo with generation: the prompt, then the completion, in the text and in the logprobs.
  const Json both = Json::parse(body_of(exchange(post("/v1/completions",
      R"({"prompt": "the cat sat", "max_tokens": 6, "temperature": 0, "ignore_eos": true, "logprobs": 0, "echo": true})"))));
  const Json& b = both["choices"][0];
  EXPECT_EQ(b["text"], "the cat sat" + gen["choices"][0]["text"].get<std::string>());
  ASSERT_EQ(b["logprobs"]["tokens"].size(), num_prompt + 6);
  EXPECT_EQ(b["logprobs"]["text_offset"][num_prompt], std::string("the cat sat").size());
  // Streamed: the first event carries the prompt and its logprobs.
  const std::string sse = body_of(exchange(post("/v1/completions",
      R"({"prompt": "the cat sat", "max_tokens": 2, "echo": true, "logprobs": 1, "stream": true})")));
  const size_t at = sse.find("data: {");
  ASSERT_NE(at, std::string::npos) << sse;
  const Json first = Json::parse(sse.substr(at + 6, sse.find("\n\n", at) - at - 6));
  EXPECT_EQ(first["choices"][0]["text"], "the cat sat");
  EXPECT_EQ(first["choices"][0]["logprobs"]["tokens"].size(), num_prompt);
  // Streamed echo without logprobs: the prompt first, then the completion.
  const std::string plain_sse = body_of(exchange(post("/v1/completions",
      R"({"prompt": "the cat sat", "max_tokens": 2, "echo": true, "stream": true})")));
  const size_t at2 = plain_sse.find("data: {");
  ASSERT_NE(at2, std::string::npos) << plain_sse;
  const Json first2 = Json::parse(plain_sse.substr(at2 + 6, plain_sse.find("\n\n", at2) - at2 - 6));
  EXPECT_EQ(first2["choices"][0]["text"], "the cat sat");
  EXPECT_TRUE(first2["choices"][0]["logprobs"].is_null());
  EXPECT_NE(plain_sse.find("data: [DONE]"), std::string::npos);
  // echo without logprobs needs no scoring; max_tokens 0 without echo is refused.
  const Json plain = Json::parse(body_of(exchange(post("/v1/completions", R"({"prompt": "the cat", "max_tokens": 0, "echo": true})"))));
  EXPECT_EQ(plain["choices"][0]["text"], "the cat");
  EXPECT_NE(exchange(post("/v1/completions", R"({"prompt": "the cat", "max_tokens": 0})")).find("'max_tokens' must be in [1, 2147483647], got 0 (0, which scores the prompt and generates nothing, needs"),
            std::string::npos);
  wait_engine_idle();
}

// The legacy API's top_logprobs always hold the chosen token ("up to logprobs + 1 elements"),
// with the logprob token_logprobs gives it, also when sampling picked one outside the top.
TEST_F(ServerTest, LegacyTopLogprobsHoldTheChosenToken) {
  const Json r = Json::parse(body_of(exchange(post("/v1/completions",
      R"({"prompt": "the cat sat", "max_tokens": 12, "temperature": 2, "seed": 3, "ignore_eos": true,
          "logprobs": 1, "return_tokens_as_token_ids": true})"))));
  const Json& lp = r["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 12u) << r.dump();
  int outside = 0;
  for (size_t i = 0; i < 12; ++i) {
    const Json& top = lp["top_logprobs"][i];
    const std::string token = lp["tokens"][i].get<std::string>();
    ASSERT_TRUE(top.contains(token)) << i << ": " << top.dump();
    EXPECT_EQ(top[token], lp["token_logprobs"][i]);
    EXPECT_LE(top.size(), 2u);
    outside += top.size() == 2;
  }
  EXPECT_GT(outside, 0) << "temperature 2 should pick a token outside the top 1 somewhere: " << lp.dump();
}

// A token that is part of a character is named by its bytes, as OpenAI names them, so two such
// tokens are two names (two keys of top_logprobs), not both U+FFFD.
TEST_F(ServerTest, PartialCharacterTokensAreNamedByTheirBytes) {
  const Tokenizer& tok = *loaded_.tokenizer;
  int32_t partial = -1;
  for (int32_t id = 0; id < tok.vocab_size() && partial < 0; ++id) {
    const std::string piece = tok.token_to_piece(id, /*render_special=*/true);
    if (!piece.empty() && !utf8_is_valid(piece)) partial = id;
  }
  ASSERT_GE(partial, 0) << "the demo vocabulary has byte tokens";
  std::string expected = "bytes:";
  for (const unsigned char b : tok.token_to_piece(partial, true)) expected += fmt::format("\\x{:02x}", b);
  const Json r = Json::parse(body_of(exchange(post("/v1/completions",
      Json{{"prompt", {partial}}, {"max_tokens", 1}, {"echo", true}, {"logprobs", 0}}.dump()))));
  ASSERT_TRUE(r.contains("choices")) << r.dump();
  EXPECT_EQ(r["choices"][0]["logprobs"]["tokens"][0], expected) << r.dump();
}

// Echo of a text prompt with special tokens written in it: the text comes back as sent, and
// each prompt token's text_offset points at that token's text in it (the BOS a vocabulary
// adds in front is not in it). Token ids come back decoded without their control tokens, the
// offsets indexing that text.
TEST_F(ServerTest, EchoOffsetsIndexTheEchoedText) {
  const std::string prompt = "<|im_start|>user\nhi<|im_end|> the cat";
  const Json tok = Json::parse(body_of(exchange(post("/tokenize", Json{{"prompt", prompt}}.dump()))));
  const std::vector<int32_t> ids = tok["tokens"].get<std::vector<int32_t>>();
  for (const bool as_text : {true, false}) {
    Json body = {{"max_tokens", 2}, {"echo", true}, {"logprobs", 0}, {"temperature", 0}, {"ignore_eos", true}};
    if (as_text) body["prompt"] = prompt;
    else body["prompt"] = ids;
    const Json r = Json::parse(body_of(exchange(post("/v1/completions", body.dump()))));
    const Json& c = r["choices"][0];
    const std::string text = c["text"].get<std::string>();
    const Json& lp = c["logprobs"];
    ASSERT_EQ(lp["tokens"].size(), ids.size() + 2) << r.dump();
    if (as_text) {
      EXPECT_TRUE(text.starts_with(prompt)) << text;
    }
    int specials = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      const int64_t at = lp["text_offset"][i].get<int64_t>(), next = lp["text_offset"][i + 1].get<int64_t>();
      ASSERT_LE(at, next) << i;
      ASSERT_LE(next, static_cast<int64_t>(text.size())) << i;
      const std::string span = text.substr(static_cast<size_t>(at), static_cast<size_t>(next - at));
      const std::string name = lp["tokens"][i].get<std::string>();
      const bool special = name == "<|im_start|>" || name == "<|im_end|>";
      specials += special;
      const std::string expected = special && !as_text ? "" : name;
      EXPECT_EQ(span, expected) << i << (as_text ? " (text)" : " (ids)");
    }
    EXPECT_EQ(specials, 2) << "the demo vocabulary should parse the ChatML markers: " << lp["tokens"].dump();
  }
}

// A generated token whose bytes are no UTF-8 comes back as U+FFFD (three bytes), a token that
// only starts a character adds nothing until the next completes it, and a control token adds
// nothing: each text_offset is where that token's text begins in the text returned, not the count
// of the tokens' raw bytes (which drifted from the text at the first U+FFFD).
TEST_F(ServerTest, OutputOffsetsIndexTheTextReturned) {
  const Json r = Json::parse(body_of(exchange(post("/v1/completions",
      R"({"prompt": "hello", "max_tokens": 48, "temperature": 0, "ignore_eos": true, "logprobs": 0})"))));
  ASSERT_TRUE(r.contains("choices")) << r.dump();
  const std::string text = r["choices"][0]["text"].get<std::string>();
  const Json& lp = r["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 48u);
  int byte_tokens = 0, checked = 0;
  for (size_t i = 0; i < 48; ++i) {
    const int64_t at = lp["text_offset"][i].get<int64_t>();
    ASSERT_LE(at, static_cast<int64_t>(text.size())) << i;
    if (i > 0) {
      ASSERT_GE(at, lp["text_offset"][i - 1].get<int64_t>()) << i;
    }
    const std::string name = lp["tokens"][i].get<std::string>();
    const bool control = name.starts_with("<|") && name.ends_with("|>");  // adds no text
    if (name.starts_with("bytes:")) {
      ++byte_tokens;
    } else if (control) {
      EXPECT_EQ(lp["text_offset"][std::min<size_t>(i + 1, 47)], at) << i;
    } else if (i > 0 || !name.starts_with(' ')) {
      // After bytes held back that this token shows to be no character, their U+FFFD comes
      // first, and the offset points past it, at the token's own text.
      EXPECT_EQ(text.substr(static_cast<size_t>(at), name.size()), name) << "token " << i << " in " << text;
      ++checked;
    }
  }
  EXPECT_GT(byte_tokens, 0) << "the demo model's greedy output after 'hello' holds tokens that are not UTF-8";
  EXPECT_GT(checked, 20);
}

}  // namespace
}  // namespace sluice::server
