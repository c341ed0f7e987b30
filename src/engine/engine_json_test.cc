// JSON mode (Request::response_format): what the engine returns is a JSON object, or a prefix
// of one when max_tokens cut it; nothing else about the engine changes.
#include <latch>

#include <nlohmann/json.hpp>

#include "engine/engine_test_util.h"
#include "engine/json_constraint.h"

namespace sluice {
namespace {

using engine_test::expect_same_output;
using engine_test::Fixture;

Request json_request(const Fixture& f, std::string_view prompt, float temperature, uint64_t seed) {
  Request r = f.request(prompt, 400);
  r.ignore_eos = false;
  r.response_format = ResponseFormat::kJsonObject;
  r.sampling.temperature = temperature;
  r.seed = seed;
  r.logprobs = true;
  return r;
}

TEST(EngineJson, OutputsAreJsonObjectsEndedWhenTheyClose) {
  Fixture f;
  int num_complete = 0;
  for (float temperature : {0.0f, 0.7f, 1.0f}) {
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      const StreamOutput o = f.run(json_request(f, "Write the answer as JSON:", temperature, seed));
      SCOPED_TRACE(o.text);
      JsonState s;
      ASSERT_TRUE(s.feed(o.text)) << "not a prefix of a JSON object";
      for (const TokenOutput& t : o.tokens) EXPECT_TRUE(std::isfinite(t.logprob));
      if (o.finish_reason == FinishReason::kStop) {
        EXPECT_TRUE(s.done());
        EXPECT_TRUE(nlohmann::json::parse(o.text).is_object());
        ++num_complete;
      } else {
        EXPECT_EQ(o.finish_reason, FinishReason::kLength);
        EXPECT_EQ(o.tokens.size(), 400u);
      }
      if (temperature == 0.0f) break;  // greedy: every seed gives the same output
    }
  }
  EXPECT_GT(num_complete, 0);
}

// "stop" promises an object that parses: cut short by a stop string, the answer is "length".
TEST(EngineJson, AStopStringCutIsLengthNotStop) {
  Fixture f;
  Request r = json_request(f, "Write the answer as JSON:", 0.7f, 1);
  const StreamOutput whole = f.run(r);
  ASSERT_GT(whole.text.size(), 8u) << whole.text;
  // A stop string from the middle of the whole answer (whole characters of it).
  size_t at = whole.text.size() / 2;
  while (at > 1 && (static_cast<uint8_t>(whole.text[at]) & 0xC0) == 0x80) --at;
  size_t end = at + 1;
  while (end < whole.text.size() && (static_cast<uint8_t>(whole.text[end]) & 0xC0) == 0x80) ++end;
  r.stop_strings = {whole.text.substr(at, end - at)};
  const StreamOutput cut = f.run(r);
  SCOPED_TRACE(cut.text);
  EXPECT_LT(cut.text.size(), whole.text.size());
  EXPECT_EQ(cut.finish_reason, FinishReason::kLength);
  JsonState s;
  EXPECT_TRUE(s.feed(cut.text));
  EXPECT_FALSE(s.done());
}

// A stop string that matches the closing brace cuts it off: not "stop" either.
TEST(EngineJson, AStopStringAtTheClosingBraceIsLength) {
  Fixture f;
  int checked = 0;
  for (uint64_t seed = 1; seed <= 40 && checked < 2; ++seed) {
    Request r = json_request(f, "Write the answer as JSON:", 1.0f, seed);
    const StreamOutput whole = f.run(r);
    // A flat object: its one '}' closes it.
    if (whole.finish_reason != FinishReason::kStop || std::ranges::count(whole.text, '}') != 1) continue;
    r.stop_strings = {"}"};
    const StreamOutput cut = f.run(r);
    SCOPED_TRACE(cut.text);
    EXPECT_EQ(cut.finish_reason, FinishReason::kLength);
    EXPECT_EQ(cut.text.find('}'), std::string::npos);
    ++checked;
  }
  EXPECT_GT(checked, 0) << "no seed gave a flat object";
}

TEST(EngineJson, TheSameOutputAloneAmongOthersAndWithSpeculation) {
  std::vector<StreamOutput> alone;
  {
    Fixture f;
    for (uint64_t seed = 1; seed <= 3; ++seed) alone.push_back(f.run(json_request(f, "A JSON object:", 1.0f, seed)));
  }
  {
    // Among other requests, in a batch of JSON and text requests on several threads.
    Fixture f;
    std::vector<Request> reqs;
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      reqs.push_back(json_request(f, "A JSON object:", 1.0f, seed));
      Request text = f.request("A JSON object:", 50);
      text.sampling.temperature = 1.0f;
      text.seed = seed;
      reqs.push_back(text);
    }
    const std::vector<StreamOutput> outs = engine_test::run_concurrently(*f.engine, reqs, 3);
    for (size_t i = 0; i < alone.size(); ++i) expect_same_output(alone[i], outs[2 * i], "batched");
  }
  for (const char* method : {"ngram"}) {
    EngineConfig config;
    config.spec.method = method;
    config.spec.num_tokens = 4;
    Fixture f(config);
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      expect_same_output(alone[seed - 1], f.run(json_request(f, "A JSON object:", 1.0f, seed)), method);
    }
  }
}

// A prompt whose blocks come from the prefix cache gives the same JSON answer.
TEST(EngineJson, APrefixCacheHitChangesNothing) {
  Fixture f;
  const std::string prompt =
      "Answer with a JSON object that describes the weather today, the place, the temperature and the wind, "
      "and nothing else:";
  const StreamOutput first = f.run(json_request(f, prompt, 1.0f, 7));
  const StreamOutput again = f.run(json_request(f, prompt, 1.0f, 7));
  EXPECT_EQ(first.metrics.cached_tokens, 0);
  EXPECT_GT(again.metrics.cached_tokens, 0);
  expect_same_output(first, again, "prefix cache hit");
}

TEST(EngineJson, IsNotCoalescedWithTheSameRequestInText) {
  std::latch release(1);
  EngineConfig config;
  engine_test::hold_first_step(config, release);
  Fixture f(config);
  Request text = f.request("Once", 30);
  Request json = text;
  json.response_format = ResponseFormat::kJsonObject;
  auto a = f.engine->submit(text);
  auto b = f.engine->submit(json);
  ASSERT_TRUE(a && b);
  release.count_down();
  const StreamOutput ta = a->wait(), tb = b->wait();
  EXPECT_FALSE(ta.metrics.coalesced);
  EXPECT_FALSE(tb.metrics.coalesced);
  JsonState s;
  EXPECT_TRUE(s.feed(tb.text));
  EXPECT_NE(ta.text, tb.text);
}

TEST(EngineJson, MinTokensIsRefused) {
  Fixture f;
  Request r = json_request(f, "x", 0.0f, 1);
  r.min_tokens = 3;
  auto h = f.engine->submit(r);
  ASSERT_FALSE(h.has_value());
  EXPECT_NE(h.error().message().find("min_tokens cannot be combined with a JSON response format"), std::string::npos);
}

}  // namespace
}  // namespace sluice
