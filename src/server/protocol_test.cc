// Request parsing and /metrics formatting, without a network.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <random>

#include "server/chat_messages.h"
#include "server/openai_protocol.h"
#include "server/prometheus.h"

namespace sluice::server {
namespace {

Json body(std::string_view text) {
  auto j = parse_body(text);
  EXPECT_TRUE(j.has_value()) << text;
  return j ? *j : Json::object();
}

TEST(ProtocolTest, CompletionDefaultsAndFields) {
  auto r = parse_completion_request(body(R"({"prompt": "hi"})"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->prompts.size(), 1u);
  EXPECT_EQ(r->prompts[0].text, "hi");
  EXPECT_EQ(r->params.n, 1);
  EXPECT_FALSE(r->params.max_tokens.has_value());
  EXPECT_EQ(r->params.sampling.temperature, 1.0f);  // OpenAI's default
  EXPECT_FALSE(r->params.logprobs);

  r = parse_completion_request(body(R"({"prompt": [[1, 2], "x"], "n": 3, "max_tokens": 7, "temperature": 0,
      "top_p": 0.5, "top_k": -1, "min_p": 0.1, "seed": -1, "stop": "END", "logprobs": 0, "stream": true,
      "stream_options": {"include_usage": true}, "user": "s1", "priority": -2, "ignore_eos": true,
      "presence_penalty": 1.5, "frequency_penalty": -0.5, "store": true, "metadata": {"is": "ignored"},
      "min_tokens": 2, "include_stop_str_in_output": true, "skip_special_tokens": true, "unknown": null})"));
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->prompts.size(), 2u);
  EXPECT_TRUE(r->prompts[0].is_tokens);
  EXPECT_EQ(r->prompts[0].tokens, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(r->prompts[1].text, "x");
  const GenerationParams& p = r->params;
  EXPECT_EQ(p.n, 3);
  EXPECT_EQ(p.max_tokens, 7);
  EXPECT_EQ(p.sampling.temperature, 0.0f);
  EXPECT_EQ(p.sampling.top_p, 0.5f);
  EXPECT_EQ(p.sampling.top_k, 0);  // -1 is vLLM's "off"
  EXPECT_FLOAT_EQ(p.sampling.min_p, 0.1f);
  EXPECT_FALSE(p.seed.has_value());  // -1: no seed, as llama.cpp's
  // Any other integer is a seed, negative ones too (OpenAI takes any int64).
  for (const char* negative : {"-42", "-42.0"}) {
    auto r = parse_completion_request(body(fmt::format(R"({{"prompt": "x", "seed": {}}})", negative)));
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->params.seed, static_cast<uint64_t>(int64_t{-42}));
  }
  auto lowest = parse_completion_request(body(R"({"prompt": "x", "seed": -9223372036854775808})"));
  ASSERT_TRUE(lowest) << lowest.error().message;
  EXPECT_EQ(lowest->params.seed, uint64_t{1} << 63);
  EXPECT_EQ(p.min_tokens, 2);
  EXPECT_TRUE(p.include_stop_str_in_output);
  EXPECT_EQ(p.stop, std::vector<std::string>{"END"});
  EXPECT_TRUE(p.logprobs);  // logprobs: 0 asks for the chosen token's logprob
  EXPECT_EQ(p.sampling.top_logprobs, 0);
  EXPECT_TRUE(p.stream);
  EXPECT_TRUE(p.include_usage);
  EXPECT_EQ(p.user, "s1");
  EXPECT_EQ(p.priority, -2);
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_FLOAT_EQ(p.sampling.presence_penalty, 1.5f);
  EXPECT_FLOAT_EQ(p.sampling.frequency_penalty, -0.5f);
}

// tool_calls are checked and put in the form templates read; null or [] is no call (and then
// content is required); an assistant's refusal part is its text.
TEST(ProtocolTest, ToolCallsAreCheckedAndTheirArgumentsParsed) {
  auto chat = [](const std::string& messages) { return parse_chat_request(body(R"({"messages": )" + messages + "}")); };
  auto error_of = [&](const std::string& messages) {
    auto r = chat(messages);
    return r ? std::string("accepted") : r.error().message;
  };
  auto r = chat(R"([{"role": "user", "content": "x"},
      {"role": "assistant", "content": "y", "tool_calls": []},
      {"role": "assistant", "content": "z", "tool_calls": null},
      {"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f", "arguments": "not json"}},
                                                              {"function": {"name": "g"}}]},
      {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]}])");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_FALSE(r->messages[1].contains("tool_calls"));  // templates test `'tool_calls' in message`
  EXPECT_FALSE(r->messages[2].contains("tool_calls"));
  EXPECT_EQ(r->messages[3]["tool_calls"][0]["function"]["arguments"], "not json");
  EXPECT_EQ(r->messages[3]["tool_calls"][1]["function"]["arguments"], "{}");
  EXPECT_EQ(r->messages[4]["content"], Json::parse(R"([{"type": "text", "text": "no"}])"));
  // What a template that wants objects gets: a malformed call (sent back) stays text.
  const Json objects = for_template(r->messages, chat::MessageForms{});
  EXPECT_EQ(objects[3]["tool_calls"][0]["function"]["arguments"], "not json");
  EXPECT_EQ(objects[3]["tool_calls"][1]["function"]["arguments"], Json::object());
  EXPECT_EQ(objects[4]["content"], "no");
  EXPECT_EQ(error_of(R"([{"role": "assistant", "tool_calls": []}])"), "'messages[0].content' is required");
  const std::string shape = "' must be {\"id\": ID, \"type\": \"function\", \"function\": {\"name\": NAME, "
                            "\"arguments\": JSON_TEXT}} (a non-empty name; id, if given, a string)";
  EXPECT_EQ(error_of(R"([{"role": "assistant", "tool_calls": [{"id": "1"}]}])"), "'messages[0].tool_calls[0]" + shape);
  EXPECT_EQ(error_of(R"([{"role": "assistant", "tool_calls": [{"type": "x", "function": {"name": "f"}}]}])"),
            "'messages[0].tool_calls[0]" + shape);
  EXPECT_EQ(error_of(R"([{"role": "assistant", "tool_calls": [{"id": 5, "function": {"name": "f"}}]}])"),
            "'messages[0].tool_calls[0]" + shape);
  EXPECT_EQ(error_of(R"([{"role": "assistant", "tool_calls": "x"}])"),
            "'messages[0].tool_calls' must be an array, got string");
  EXPECT_EQ(error_of(R"([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 3}}]}])"),
            "'messages[0].tool_calls[0].function.arguments' must be a string of JSON, got integer");
  EXPECT_EQ(error_of(R"([{"role": "user", "content": "x", "tool_calls": [{"function": {"name": "f"}}]}])"),
            "'messages[0].tool_calls' is only for assistant messages");
  EXPECT_EQ(error_of(R"([{"role": "user", "content": "x", "name": 5}])"), "'messages[0].name' must be a string, got integer");
  EXPECT_EQ(error_of(R"([{"role": "tool", "content": "x", "tool_call_id": {}}])"),
            "'messages[0].tool_call_id' must be a string, got object");
}

// Integers written as floats (5.0, 1e1) are those integers, as Python clients send them.
TEST(ProtocolTest, IntegralFloatsAreIntegers) {
  auto r = parse_completion_request(body(R"({"prompt": "x", "max_tokens": 5.0, "n": 1e0, "seed": 7.0})"));
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->params.max_tokens, 5);
  EXPECT_EQ(r->params.n, 1);
  EXPECT_EQ(r->params.seed, 7u);
  auto tokens = parse_completion_request(body(R"({"prompt": [1.0, 2e0, 3]})"));
  ASSERT_TRUE(tokens) << tokens.error().message;
  EXPECT_EQ(tokens->prompts[0].tokens, (std::vector<int32_t>{1, 2, 3}));
  auto half = parse_completion_request(body(R"({"prompt": [1.5]})"));
  ASSERT_FALSE(half);
  EXPECT_NE(half.error().message.find("must be a non-negative integer token id, got 1.5"), std::string::npos)
      << half.error().message;
}

TEST(ProtocolTest, NullMeansAbsent) {
  auto r = parse_completion_request(body(R"({"prompt": "x", "max_tokens": null, "temperature": null, "stop": null})"));
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->params.max_tokens);
  EXPECT_EQ(r->params.sampling.temperature, 1.0f);
}

TEST(ProtocolTest, ChatMessagesAndLogprobs) {
  auto r = parse_chat_request(body(R"({"messages": [
      {"role": "system", "content": "s"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}}]}],
      "logprobs": true, "top_logprobs": 3, "max_completion_tokens": 9, "max_tokens": 9,
      "chat_template_kwargs": {"enable_thinking": false}})"));
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->messages[1]["content"].size(), 2u);
  EXPECT_TRUE(r->messages[2]["content"].is_null());
  EXPECT_EQ(r->messages[2]["tool_calls"][0]["id"], "1");
  EXPECT_EQ(r->messages[2]["tool_calls"][0]["function"]["arguments"], "{\"x\": 1}");
  // Most templates: parts joined with newlines, and the arguments' JSON text becomes the object
  // they print (once) with tojson.
  const Json usual = for_template(r->messages, chat::MessageForms{});
  EXPECT_EQ(usual[1]["content"], "a\nb");
  EXPECT_EQ(usual[2]["tool_calls"][0]["function"]["arguments"], Json::parse(R"({"x": 1})"));
  // A template that loops over a user's parts gets them; one that concatenates the arguments
  // gets the text as sent.
  const Json other = for_template(r->messages, chat::MessageForms{.object_arguments = false, .parts_roles = {"user"}});
  EXPECT_EQ(other[1]["content"], r->messages[1]["content"]);
  EXPECT_EQ(other[2]["tool_calls"][0]["function"]["arguments"], "{\"x\": 1}");
  EXPECT_EQ(other[0]["content"], "s");
  EXPECT_TRUE(r->params.logprobs);
  EXPECT_EQ(r->params.sampling.top_logprobs, 3);
  EXPECT_EQ(r->params.max_tokens, 9);  // both names, one value
  EXPECT_STREQ(r->params.max_tokens_key, "max_completion_tokens");
  EXPECT_TRUE(r->tools.is_null());
  EXPECT_EQ(r->template_kwargs["enable_thinking"], false);
  // Key order is the client's (templates print tool schemas in it).
  auto ordered = parse_chat_request(body(R"({"messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "f", "parameters": {"z": 1, "a": 2}}}]})"));
  ASSERT_TRUE(ordered);
  EXPECT_EQ(ordered->tools.dump(), R"([{"type":"function","function":{"name":"f","parameters":{"z":1,"a":2}}}])");
}

struct BadCase {
  const char* body;
  bool chat;
  const char* message;
  const char* param;
};

TEST(ProtocolTest, BadRequestsNameTheField) {
  const BadCase cases[] = {
      {R"({})", false, "'prompt' is required", "prompt"},
      {R"({"prompt": []})", false, "'prompt' must not be empty", "prompt"},
      {R"({"prompt": [1, "a"]})", false, "'prompt' token at index 1 must be a non-negative integer token id, got string", "prompt"},
      {R"({"prompt": [[]]})", false, "found an element of type empty array", "prompt"},
      {R"({"prompt": [[1, 2], [3, [4]]]})", false, "'prompt[1]' token at index 1 must be a non-negative integer", "prompt[1]"},
      {R"({"prompt": [-3]})", false, "got -3", "prompt"},
      {R"({"prompt": "x", "n": 2.5})", false, "'n' must be an integer, got number", "n"},
      {R"({"prompt": "x", "max_tokens": 1e30})", false, "'max_tokens' must be in [1, 2147483647], got 1e+30", "max_tokens"},
      {R"({"prompt": "x", "seed": 1180591620717411303424})", false, "'seed' must be in [-9223372036854775808, 18446744073709551615]", "seed"},
      {R"({"prompt": "x", "seed": -1e19})", false, "'seed' must be in [-9223372036854775808, 18446744073709551615]", "seed"},
      // One below -2^63 parses as the float -2^63: refused, not taken as -2^63.
      {R"({"prompt": "x", "seed": -9223372036854775809})", false, "'seed' must be in [-9223372036854775808, 18446744073709551615]", "seed"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "none"})", true,
       "'tool_choice' is only allowed when 'tools' are given", "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f", "strict": true}}]})",
       true, "'tools[0].function.strict' true is not supported", "tools"},
      {R"({"prompt": "x", "store": "yes"})", false, "'store' must be a boolean, got string", "store"},
      {R"({"prompt": "x", "metadata": {"a": 1}})", false, "'metadata' must be an object of strings, got object", "metadata"},
      {R"({"prompt": "x", "service_tier": 7})", false, "'service_tier' must be a string, got integer", "service_tier"},
      {R"({"prompt": "x", "seed": 0.5})", false, "'seed' must be an integer, got number", "seed"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 3, "max_completion_tokens": 5})", true,
       "'max_tokens' (3) and 'max_completion_tokens' (5) differ", "max_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "x"}]})", true, "'tools[0]' must be", "tools"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": ""}}]})",
       true, "a non-empty name", "tools"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f",
       "parameters": []}}]})", true, "parameters, if given, an object", "tools"},
      {R"({"prompt": "x", "max_tokens": true})", false, "'max_tokens' must be an integer, got boolean", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 99999999999})", false, "'max_tokens' must be in [1, 2147483647]", "max_tokens"},
      {R"({"prompt": "x", "temperature": "hot"})", false, "'temperature' must be a number, got string", "temperature"},
      {R"({"prompt": "x", "min_p": 1.5})", false, "'min_p' must be in [0, 1], got 1.5", "min_p"},
      {R"({"prompt": "x", "presence_penalty": -3})", false, "'presence_penalty' must be in [-2, 2]", "presence_penalty"},
      {R"({"prompt": "x", "repetition_penalty": 0})", false, "'repetition_penalty' must be in (0, 100]", "repetition_penalty"},
      {R"({"prompt": "x", "top_k": -2})", false, "'top_k' must be in [-1,", "top_k"},
      {R"({"prompt": "x", "seed": "1"})", false, "'seed' must be an integer, got string", "seed"},
      {R"({"prompt": "x", "stop": ["a", ""]})", false, "'stop' strings must not be empty", "stop"},
      {R"({"prompt": "x", "stop": ["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16","17"]})", false,
       "at most 16 strings, got 17", "stop"},
      {R"({"prompt": "x", "stream": "yes"})", false, "'stream' must be a boolean", "stream"},
      {R"({"prompt": "x", "logit_bias": {"1": 5}})", false, "'logit_bias' is not supported", "logit_bias"},
      {R"({"prompt": "x", "best_of": 3})", false, "'best_of' other than n is not supported", "best_of"},
      {R"({"prompt": "x", "best_of": 0})", false, "'best_of' must be", "best_of"},
      {R"({"prompt": "x", "best_of": 1, "n": 3})", false, "'best_of' (1) must be at least n (3)", "best_of"},
      {R"({"prompt": "x", "suffix": "y"})", false, "'suffix' is not supported", "suffix"},
      {R"({"prompt": ["a","b","c"], "n": 50})", false, "asks for 150 choices; at most 128", "n"},
      {R"({"prompt": "x", "user": 5})", false, "'user' must be a string, got integer", "user"},
      {R"({"messages": "hi"})", true, "'messages' must be an array, got string", "messages"},
      {R"({"messages": [5]})", true, "'messages[0]' must be an object, got integer", "messages[0]"},
      {R"({"messages": [{"role": "user"}]})", true, "'messages[0].content' is required", "messages[0]"},
      {R"({"messages": [{"role": "user", "content": 5}]})", true, "must be a string or an array of content parts", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})", true, "'messages[0].content[0].text' must be a string", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 1})", true, "'logprobs' must be a boolean", "logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 21, "logprobs": true})", true, "'top_logprobs' must be in [0, 20]", "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": {}})", true, "'tools' must be an array", "tools"},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "xml"}})", true, "unknown 'response_format' type \"xml\"", "response_format"},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": "json"})", true, "must be an object", "response_format"},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object", "schema": {}}})", true, "unknown field 'response_format.schema'", "response_format"},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {}}})", true, "json_schema is not supported", "response_format"},
      {R"({"prompt": "x", "max_tokens_extra": 1})", false, "unknown field 'max_tokens_extra'", "max_tokens_extra"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprob": 1})", true, "unknown field 'top_logprob'", "top_logprob"},
      {R"({"prompt": "x", "top_logprobs": 1})", false, "unknown field 'top_logprobs'", "top_logprobs"},
      {R"({"prompt": "x", "guided_json": {}})", false, "'guided_json' is not supported", "guided_json"},
      {R"({"messages": [{"role": "user", "content": "x"}], "guided_regex": "a+"})", true, "structured output", "guided_regex"},
      {R"({"messages": [{"role": "user", "content": "x"}], "guided_choice": ["a"]})", true, "structured output", "guided_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [], "tool_choice": "required"})", true, "'tool_choice' \"required\" is not supported", "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [], "tool_choice": {"type": "function", "function": {"name": "f"}}})", true, "cannot force a tool call", "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [], "tool_choice": "bogus"})", true, "'tool_choice' must be \"none\", \"auto\", \"required\" or", "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [], "tool_choice": {"type": "allowed_tools", "allowed_tools": {}}})", true, "cannot force a tool call", "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "parallel_tool_calls": false})", true, "'parallel_tool_calls' false", "parallel_tool_calls"},
      {R"({"prompt": "x", "skip_special_tokens": false})", false, "'skip_special_tokens' other than true", "skip_special_tokens"},
      {R"({"prompt": "x", "max_tokens": 3, "min_tokens": 4})", false, "'min_tokens' (4) must not exceed 'max_tokens' (3)", "min_tokens"},
      {R"({"prompt": "x", "min_tokens": -1})", false, "'min_tokens' must be in [0,", "min_tokens"},
      // Refused here, not by the engine (whose refusals are counted as requests it cannot hold).
      {R"({"messages": [{"role": "user", "content": "x"}], "min_tokens": 1, "response_format": {"type": "json_object"}})", true, "'min_tokens' cannot be combined with a JSON 'response_format'", "min_tokens"},
      {R"({"prompt": "x", "top_p": 1e-300})", false, "got 1e-300, which is 0 as a 32-bit float", "top_p"},
      {R"({"prompt": "x", "stream": true, "stream_options": {"include_usage": true, "continuous_usage_stats": true}})", false, "unknown field 'stream_options.continuous_usage_stats'", "stream_options"},
      {R"({"prompt": "x", "prediction": "y"})", false, "'prediction' must be an object", "prediction"},
      {R"({"prompt": "x", "prediction": {"type": "text", "content": "y"}})", false, "'prediction' must be an object", "prediction"},
      {R"({"prompt": "x", "prediction": {"type": "content"}})", false, "must be a string or an array of text parts", "prediction"},
      {R"({"prompt": "x", "prediction": {"type": "content", "content": [{"type": "image_url"}]}})", false, "parts must be", "prediction"},
      {R"({"prompt": "x", "prediction": {"type": "content", "content": "y", "extra": 1}})", false, "unknown field 'prediction.extra'", "prediction"},
      {R"({"prompt": "x", "speculative": "no"})", false, "'speculative' must be a boolean", "speculative"},
  };
  for (const BadCase& c : cases) {
    const Json j = body(c.body);
    const ApiError e = c.chat ? parse_chat_request(j).error() : parse_completion_request(j).error();
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_NE(e.message.find(c.message), std::string::npos) << c.body << "\n  got: " << e.message;
    EXPECT_EQ(e.param, c.param) << c.body;
  }
}

TEST(ProtocolTest, PredictionAndSpeculative) {
  auto r = parse_completion_request(body(R"({"prompt": "x", "prediction": {"type": "content", "content": "abc"}})"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->params.prediction, "abc");
  EXPECT_TRUE(r->params.speculative);
  auto c = parse_chat_request(body(R"({"messages": [{"role": "user", "content": "x"}], "speculative": false,
      "prediction": {"type": "content", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}})"));
  ASSERT_TRUE(c);
  EXPECT_EQ(c->params.prediction, "ab");
  EXPECT_FALSE(c->params.speculative);
  EXPECT_FALSE(parse_completion_request(body(R"({"prompt": "x"})"))->params.prediction.has_value());
}

TEST(ProtocolTest, ResponseFormatTextOrJsonObject) {
  EXPECT_EQ(parse_completion_request(body(R"({"prompt": "x"})"))->params.response_format, ResponseFormat::kText);
  EXPECT_EQ(parse_completion_request(body(R"({"prompt": "x", "response_format": {"type": "text"}})"))->params.response_format,
            ResponseFormat::kText);
  auto c = parse_chat_request(body(R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}})"));
  ASSERT_TRUE(c);
  EXPECT_EQ(c->params.response_format, ResponseFormat::kJsonObject);
  EXPECT_EQ(parse_completion_request(body(R"({"prompt": "x", "response_format": {"type": "json_object"}})"))->params.response_format,
            ResponseFormat::kJsonObject);
}

TEST(ProtocolTest, MalformedBodies) {
  EXPECT_NE(parse_body("").error().message.find("the request body is empty"), std::string::npos);
  EXPECT_NE(parse_body("{\"a\": ").error().message.find("not valid JSON (at byte"), std::string::npos);
  EXPECT_NE(parse_body("\"x\"").error().message.find("must be a JSON object, got string"), std::string::npos);
  EXPECT_NE(parse_body("{\"a\": \"\xff\"}").error().message.find("not valid JSON"), std::string::npos);
  EXPECT_NE(parse_body(std::string(100000, '[')).error().message.find("deeper than 64"), std::string::npos);
  // Brackets inside strings do not count as nesting.
  EXPECT_TRUE(parse_body("{\"a\": \"" + std::string(1000, '[') + "\"}"));
  // A key twice in one object, at any depth, means different requests to different readers.
  EXPECT_EQ(parse_body(R"({"prompt": "hi", "stream": true, "stream": false})").error().message,
            "the request body is ambiguous: key 'stream' appears twice in one object (send each key once)");
  EXPECT_FALSE(parse_body(R"({"messages": [{"role": "user", "role": "system", "content": "x"}]})"));
  EXPECT_TRUE(parse_body(R"({"a": {"k": 1}, "b": {"k": 2}})"));
}

// chat_template_kwargs cannot set what the request's own fields give the template.
TEST(ProtocolTest, TemplateKwargsCannotReplaceTheRequestsFields) {
  for (const char* key : {"messages", "tools", "documents", "add_generation_prompt"}) {
    auto r = parse_chat_request(body(fmt::format(R"({{"messages": [{{"role": "user", "content": "hi"}}],
        "chat_template_kwargs": {{"{}": []}}}})", key)));
    ASSERT_FALSE(r) << key;
    EXPECT_EQ(r.error().param, "chat_template_kwargs");
    EXPECT_NE(r.error().message.find(fmt::format("cannot set '{}'", key)), std::string::npos) << r.error().message;
  }
  EXPECT_TRUE(parse_chat_request(body(R"({"messages": [{"role": "user", "content": "hi"}],
      "chat_template_kwargs": {"bos_token": "<s>", "enable_thinking": true}})")));
}

TEST(ProtocolTest, ErrorBodyIsOpenAiShaped) {
  const Json e = Json::parse(ApiError::invalid("bad \"thing\"", "n").body());
  EXPECT_EQ(e["error"]["message"], "bad \"thing\"");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["param"], "n");
  EXPECT_TRUE(e["error"]["code"].is_null());
  EXPECT_EQ(ApiError::overloaded("full").status, 429);
  EXPECT_GT(ApiError::overloaded("full").retry_after, 0);
}

// Mutated valid bodies: whatever comes out, parsing returns a value or an error.
TEST(ProtocolTest, MutatedBodiesNeverCrash) {
  const std::string seeds[] = {
      R"({"prompt": ["a", [1, 2]], "n": 2, "max_tokens": 3, "stop": ["x"], "stream": true, "stream_options": {"include_usage": true}, "logprobs": 2})",
      R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]}], "tools": [{"type": "function"}], "top_logprobs": 2, "logprobs": true, "seed": 5})",
      R"({"prompt": "hi", "messages": [{"role": "user", "content": "x"}], "tokens": [1, 2, 3], "add_special_tokens": false})",
  };
  const std::string alphabet = std::string("{}[]\",:0123456789-.eEtruefalsnl \\\xff") + '\0' + "abc";
  std::mt19937 rng(1234);
  int parsed = 0;
  for (int i = 0; i < 6000; ++i) {
    std::string s = seeds[i % 3];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < edits && !s.empty(); ++k) {
      const size_t pos = rng() % s.size();
      switch (rng() % 4) {
        case 0: s[pos] = alphabet[rng() % alphabet.size()]; break;
        case 1: s.erase(pos, 1 + rng() % 8); break;
        case 2: s.insert(pos, 1, alphabet[rng() % alphabet.size()]); break;
        default: s.resize(pos); break;
      }
    }
    auto j = parse_body(s);
    if (!j) continue;
    ++parsed;
    (void)parse_completion_request(*j);
    (void)parse_chat_request(*j);
    (void)parse_tokenize_request(*j);
    (void)parse_detokenize_request(*j);
  }
  EXPECT_GT(parsed, 300);  // the mutations reach the field checks, not only the JSON parser
}

TEST(PrometheusTest, HistogramsAreCumulativeAndLabelsEscaped) {
  EngineMetrics m;
  m.ttft_seconds.observe(0.002);
  m.ttft_seconds.observe(0.2);
  m.ttft_seconds.observe(500);
  m.prefix_cache_query_tokens = 100;
  m.prefix_cache_hit_tokens = 60;
  HttpMetrics http;
  http.responses[{"/v1/completions", 200}] = 3;
  const std::string text = prometheus_text(m, http, "a\"b\\c\nd");
  const std::string label = R"(model_name="a\"b\\c\nd")";
  EXPECT_NE(text.find("sluice_time_to_first_token_seconds_bucket{" + label + ",le=\"0.001\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find("sluice_time_to_first_token_seconds_bucket{" + label + ",le=\"0.0025\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("sluice_time_to_first_token_seconds_bucket{" + label + ",le=\"120\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("sluice_time_to_first_token_seconds_bucket{" + label + ",le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("sluice_time_to_first_token_seconds_count{" + label + "} 3\n"), std::string::npos);
  EXPECT_NE(text.find("sluice_prefix_cache_queries_total{" + label + "} 100\n"), std::string::npos);
  EXPECT_NE(text.find("sluice_prefix_cache_hits_total{" + label + "} 60\n"), std::string::npos);
  EXPECT_NE(text.find("sluice_http_responses_total{route=\"/v1/completions\",code=\"200\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE sluice_time_to_first_token_seconds histogram\n"), std::string::npos);
}

}  // namespace
}  // namespace sluice::server
