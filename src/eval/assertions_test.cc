// Every assertion type on hand-made answers, negation, weights and thresholds, JSON Schema.
#include <cmath>

#include <gtest/gtest.h>

#include "eval/assertions.h"
#include "eval/json_schema.h"

namespace sluice::eval {
namespace {

Reply answer(std::string text) {
  Reply r;
  r.text = std::move(text);
  r.finish_reason = "stop";
  r.latency_ms = 120;
  r.completion_tokens = 7;
  return r;
}

// pass of one assertion "type: value" on `text`.
bool passes(const std::string& type, const Json& value, const std::string& text, std::optional<double> threshold = {},
            const Json& vars = Json::object()) {
  Assertion a;
  a.type = type.starts_with("not-") ? type.substr(4) : type;
  a.negate = type.starts_with("not-");
  a.value = value;
  a.threshold = threshold;
  auto r = check_assertion(a, answer(text), vars, std::nullopt, nullptr);
  EXPECT_TRUE(r) << type << ": " << r.error().message();
  return r && r->pass;
}

TEST(Assertions, StringMatches) {
  EXPECT_TRUE(passes("equals", "Paris", "Paris"));
  EXPECT_FALSE(passes("equals", "Paris", "Paris."));
  EXPECT_TRUE(passes("equals", Json{{"a", 1}}, R"({ "a" : 1 })"));  // JSON values compare parsed
  EXPECT_TRUE(passes("contains", "ari", "Paris"));
  EXPECT_FALSE(passes("contains", "ARI", "Paris"));
  EXPECT_TRUE(passes("icontains", "ARI", "Paris"));
  EXPECT_TRUE(passes("not-contains", "London", "Paris"));
  EXPECT_FALSE(passes("not-icontains", "paris", "PARIS"));
  EXPECT_TRUE(passes("starts-with", "Par", "Paris"));
  EXPECT_FALSE(passes("starts-with", "aris", "Paris"));
  EXPECT_TRUE(passes("contains-any", Json::array({"x", "is"}), "Paris"));
  EXPECT_TRUE(passes("contains-any", "x, ri", "Paris"));  // a comma-separated string
  EXPECT_FALSE(passes("contains-all", Json::array({"Pa", "x"}), "Paris"));
  EXPECT_TRUE(passes("contains-all", Json::array({"Pa", "is"}), "Paris"));
  EXPECT_TRUE(passes("icontains-all", Json::array({"pa", "IS"}), "Paris"));
  EXPECT_TRUE(passes("regex", "^P\\w+s$", "Paris"));
  EXPECT_FALSE(passes("regex", "\\d", "Paris"));
  EXPECT_TRUE(passes("equals", "{{ city }}", "Paris", {}, Json{{"city", "Paris"}}));  // values are templates
}

TEST(Assertions, JsonAndSchema) {
  const Json schema = {{"type", "object"},
                       {"required", {"name", "age"}},
                       {"properties", {{"name", {{"type", "string"}, {"minLength", 1}}}, {"age", {{"type", "integer"}, {"minimum", 0}}}}},
                       {"additionalProperties", false}};
  EXPECT_TRUE(passes("is-json", nullptr, R"([1, 2])"));
  EXPECT_FALSE(passes("is-json", nullptr, "not json"));
  EXPECT_TRUE(passes("json-schema", schema, R"({"name": "Ann", "age": 3})"));
  EXPECT_FALSE(passes("json-schema", schema, R"({"name": "Ann", "age": -1})"));
  EXPECT_FALSE(passes("json-schema", schema, R"({"name": "Ann", "age": 3, "x": 0})"));
  EXPECT_FALSE(passes("is-json", schema, R"({"name": "Ann"})"));
  EXPECT_TRUE(passes("contains-json", schema, R"(Here you go: {"name": "Bo", "age": 40} -- done)"));
  EXPECT_FALSE(passes("contains-json", nullptr, "no braces"));
  // Any JSON in the output may meet the schema, not only the first.
  EXPECT_TRUE(passes("contains-json", schema, R"(First {"name": ""}, then {"name": "Bo", "age": 40}.)"));
  EXPECT_FALSE(passes("contains-json", schema, R"(First {"name": ""}, then {"age": -4}.)"));
  EXPECT_TRUE(passes("contains-json", nullptr, R"(a list: [1, {"x": 2}] )"));
  Status st = validate_json(Json::parse(R"({"items": [1, "x"]})"),
                            Json{{"properties", {{"items", {{"type", "array"}, {"items", {{"type", "number"}}}}}}}});
  EXPECT_EQ(st.message(), "/items/1: expected number, got string");
  EXPECT_EQ(validate_json(1, Json{{"frobnicate", 1}}).code(), StatusCode::kInvalid);  // a schema it cannot check
  EXPECT_TRUE(validate_json(Json::parse(R"({"a": {"b": 2}})"),
                            Json::parse(R"({"$defs": {"n": {"type": "integer"}}, "properties": {"a": {"properties": {"b": {"$ref": "#/$defs/n"}}}}})")));
  EXPECT_FALSE(validate_json("x", Json::parse(R"({"anyOf": [{"type": "number"}, {"enum": ["y"]}]})")));
  EXPECT_TRUE(validate_json("y", Json::parse(R"({"oneOf": [{"type": "number"}, {"enum": ["y"]}]})")));
  EXPECT_FALSE(validate_json("abc", Json::parse(R"({"pattern": "^\\d+$"})")));
}

TEST(Assertions, DistancesNumbersAndLimits) {
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("héllo", "hello"), 1u);  // code points, not bytes
  EXPECT_TRUE(passes("levenshtein", "sitting", "kitten"));          // 3 edits <= 5 (promptfoo's default)
  EXPECT_FALSE(passes("levenshtein", "sitting", "kitten", 2.0));     // at most 2 edits
  EXPECT_TRUE(passes("levenshtein", "sitting", "kitten", 0.5));      // normalized 3/7 <= 0.5
  EXPECT_FALSE(passes("levenshtein", "sitting", "kitten", 0.4));
  EXPECT_TRUE(passes("numeric", 42, "The answer is 42."));
  EXPECT_TRUE(passes("numeric", 1234.5, "about 1,234.5 units"));
  EXPECT_FALSE(passes("numeric", 42, "The answer is 41."));
  EXPECT_TRUE(passes("numeric", 42, "The answer is 41.", 1.0));
  EXPECT_FALSE(passes("numeric", 1, "none"));
  EXPECT_TRUE(passes("numeric", -3, "it fell to -3 degrees"));
  EXPECT_TRUE(passes("latency", nullptr, "x", 500.0));   // 120 ms
  EXPECT_FALSE(passes("latency", 100, "x"));
  EXPECT_TRUE(passes("max-tokens", 7, "x"));
  EXPECT_FALSE(passes("max-tokens", 6, "x"));
  EXPECT_TRUE(passes("length", 5, "héllo"));
  EXPECT_FALSE(passes("length", Json{{"min", 6}}, "héllo"));
  EXPECT_TRUE(passes("finish-reason", "stop", "x"));
  EXPECT_FALSE(passes("not-finish-reason", "stop", "x"));
}

TEST(Assertions, LogprobsNeedThemAndJudgeTheMean) {
  Reply r = answer("ab");
  r.token_logprobs = {-0.5, -1.5};
  Assertion a{.type = "logprob", .value = -1.2};
  EXPECT_TRUE(check_assertion(a, r, Json::object(), std::nullopt, nullptr)->pass);  // mean -1.0
  a.value = -0.9;
  EXPECT_FALSE(check_assertion(a, r, Json::object(), std::nullopt, nullptr)->pass);
  Assertion ppl{.type = "perplexity", .value = 3.0};
  EXPECT_TRUE(check_assertion(ppl, r, Json::object(), std::nullopt, nullptr)->pass);  // e^1 = 2.72
  auto none = check_assertion(a, answer("ab"), Json::object(), std::nullopt, nullptr);
  EXPECT_FALSE(none->pass);
  EXPECT_NE(none->reason.find("no logprobs"), std::string::npos);
}

TEST(Assertions, RubricAsksTheJudgeAndKeepsItsAnswer) {
  Provider judge{.label = "judge", .base_url = "http://judge"};
  std::string asked;
  JudgeFn fn = [&](const Provider& p, const std::string& prompt) -> Result<Reply> {
    EXPECT_EQ(p.label, "judge");
    asked = prompt;
    return answer(R"(Sure. {"reason": "polite", "pass": true, "score": 0.7})");
  };
  Assertion a{.type = "llm-rubric", .value = "is polite", .threshold = 0.8};
  auto r = check_assertion(a, answer("Thank you!"), Json::object(), judge, fn);
  ASSERT_TRUE(r);
  EXPECT_NE(asked.find("is polite"), std::string::npos);
  EXPECT_NE(asked.find("Thank you!"), std::string::npos);
  EXPECT_DOUBLE_EQ(r->score, 0.7);
  EXPECT_FALSE(r->pass);  // 0.7 < threshold 0.8
  EXPECT_EQ(r->reason, "polite");
  EXPECT_NE(r->judge["text"].get<std::string>().find("polite"), std::string::npos);
  // Without any judge it is a suite error, not a failed grade.
  EXPECT_FALSE(check_assertion(a, answer("x"), Json::object(), std::nullopt, fn));
}

TEST(Assertions, WeightsThresholdsAndNegatedScores) {
  TestCase t;
  t.asserts = {Assertion{.type = "contains", .value = "a", .weight = 3}, Assertion{.type = "contains", .value = "z", .weight = 1},
               Assertion{.type = "contains", .value = "q", .weight = 0}};
  auto g = grade(t, answer("abc"), Json::object(), std::nullopt, nullptr);
  ASSERT_TRUE(g);
  EXPECT_DOUBLE_EQ(g->score, 0.75);
  EXPECT_FALSE(g->pass);  // without a threshold every assertion must pass
  // A weight-0 assertion that fails still fails the test (promptfoo's rule); a metric-only one
  // neither fails it nor counts in its score.
  TestCase zero;
  zero.asserts = {Assertion{.type = "contains", .value = "a"}, Assertion{.type = "contains", .value = "q", .weight = 0}};
  auto z = grade(zero, answer("abc"), Json::object(), std::nullopt, nullptr);
  ASSERT_TRUE(z);
  EXPECT_FALSE(z->pass);
  EXPECT_DOUBLE_EQ(z->score, 1.0);
  zero.asserts[1].metric_only = true;
  zero.asserts[1].weight = 1;
  z = grade(zero, answer("abc"), Json::object(), std::nullopt, nullptr);
  ASSERT_TRUE(z);
  EXPECT_TRUE(z->pass);
  EXPECT_DOUBLE_EQ(z->score, 1.0);
  t.threshold = 0.7;
  EXPECT_TRUE(grade(t, answer("abc"), Json::object(), std::nullopt, nullptr)->pass);
  // Under its threshold, a test says by how much.
  t.threshold = 0.8;
  auto under = grade(t, answer("abc"), Json::object(), std::nullopt, nullptr);
  ASSERT_TRUE(under);
  EXPECT_FALSE(under->pass);
  EXPECT_EQ(under->results.back().reason, "score 0.750 < threshold 0.8");
  // A test with a check that could not run fails and scores 0, whatever the checks that ran say
  // (none at all included).
  t.threshold.reset();
  t.asserts.resize(1);
  t.not_run = {"test 1, assertion 2: assertion type 'frobnicate' is not implemented (the test fails)"};
  auto incomplete = grade(t, answer("abc"), Json::object(), std::nullopt, nullptr);
  ASSERT_TRUE(incomplete);
  EXPECT_FALSE(incomplete->pass);
  EXPECT_EQ(incomplete->results.back().type, "not-run");
  EXPECT_EQ(incomplete->results.back().reason, t.not_run[0]);
  EXPECT_EQ(incomplete->score, 0.0);
  t.asserts.clear();
  auto none_ran = grade(t, answer("abc"), Json::object(), std::nullopt, nullptr);
  ASSERT_TRUE(none_ran);
  EXPECT_FALSE(none_ran->pass);
  EXPECT_EQ(none_ran->score, 0.0);
  Assertion lev{.type = "levenshtein", .negate = true, .value = "abcd"};
  auto r = check_assertion(lev, answer("abc"), Json::object(), std::nullopt, nullptr);
  EXPECT_DOUBLE_EQ(r->score, 0.25);  // 1 - (1 - 1/4)
  EXPECT_FALSE(r->pass);
  Assertion bad{.type = "regex", .value = "("};
  EXPECT_FALSE(check_assertion(bad, answer("x"), Json::object(), std::nullopt, nullptr));
}

}  // namespace
}  // namespace sluice::eval
