#include "common/json.h"

#include <random>

#include <gtest/gtest.h>

namespace sluice {
namespace {

using Json = nlohmann::ordered_json;

TEST(ParseJson, SameValueAsNlohmannIncludingKeyOrderAndDuplicates) {
  for (const char* text : {R"({"b": 1, "a": [1, 2.5, "x", null, true], "c": {"z": {}, "y": []}})",
                           R"({"k": 1, "j": 2, "k": 3})", R"([[], {}, [[[]]], -0, 18446744073709551615, -9223372036854775808])",
                           R"("just a string")", "123", "  null  ", R"({"\u00e9\ud83d\ude00": "\n\t"})"}) {
    auto ours = parse_json(text);
    ASSERT_TRUE(ours) << text << ": " << ours.error().message;
    const Json theirs = Json::parse(text);
    EXPECT_EQ(*ours, theirs) << text;
    EXPECT_EQ(ours->dump(), theirs.dump()) << text;  // the same key order
  }
}

TEST(ParseJson, EveryFailureIsAValueWithWhere) {
  struct Case {
    std::string text;
    std::string says;
  };
  const std::vector<Case> cases = {
      {R"({"a": 1e400})", "number overflow"},
      {R"({"x": )" + std::string(400, '9') + "}", "number overflow"},
      {R"({"a": -1e400})", "number overflow"},
      {R"({"a": "\ud800"})", "surrogate"},
      {"{\"a\": \"\xff\"}", "UTF-8"},
      {R"({"a": 1,})", "syntax error"},
      {"", "unexpected end of input"},
      {std::string(65, '[') + std::string(65, ']'), "deeper than 64"},
      {R"({"a": 1} x)", "syntax error"},
  };
  for (const Case& c : cases) {
    auto r = parse_json(c.text);
    ASSERT_FALSE(r) << c.text;
    EXPECT_NE(r.error().message.find(c.says), std::string::npos) << c.text << " -> " << r.error().message;
    EXPECT_EQ(r.error().message.find("[json.exception"), std::string::npos) << r.error().message;
  }
  EXPECT_EQ(parse_json(R"({"a": 1e400})").error().byte, 11u);
  auto deep_ok = parse_json(std::string(64, '[') + std::string(64, ']'));
  EXPECT_TRUE(deep_ok);
  auto shallow = parse_json("[[[]]]", {.max_depth = 2});
  ASSERT_FALSE(shallow);
  EXPECT_NE(shallow.error().message.find("deeper than 2"), std::string::npos);
}

// 200,000 keys: quadratic insertion (nlohmann's ordered_json::parse) would take minutes here;
// this takes milliseconds. A regression shows as a test that times out, not as a timing.
TEST(ParseJson, ManyKeysInOneObject) {
  std::string text = "{";
  constexpr int kKeys = 200000;
  for (int i = 0; i < kKeys; ++i) text += fmt::format("{}\"k{}\":{}", i ? "," : "", i, i);
  text += ",\"k7\":\"again\"}";
  auto r = parse_json(text);
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->size(), static_cast<size_t>(kKeys));
  EXPECT_EQ(r->begin().key(), "k0");
  EXPECT_EQ((*r)["k7"], "again");
  EXPECT_EQ((*r)["k199999"], 199999);
}

TEST(ParseJson, MutatedDocumentsAgreeWithNlohmann) {
  const std::string seed = R"({"model": "m", "messages": [{"role": "user", "content": "hi \u00e9"}], "n": 2,
                               "temperature": 0.5, "stop": ["a", "b"], "x": {"y": [1, -2, 3.25e10, null, false]}})";
  std::mt19937 rng(7);
  const std::string alphabet = "{}[]\",:0123456789.eE+-\\unlltrfas \x80\xff";
  int agreed = 0;
  for (int i = 0; i < 5000; ++i) {
    std::string t = seed;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % (t.size() + 1);
      switch (rng() % 3) {
        case 0: t.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
        case 1: if (at < t.size()) t.erase(at, 1); break;
        default: if (at < t.size()) t[at] = alphabet[rng() % alphabet.size()]; break;
      }
    }
    auto ours = parse_json(t);
    const Json theirs = Json::parse(t, nullptr, /*allow_exceptions=*/false);
    ASSERT_EQ(ours.has_value(), !theirs.is_discarded()) << t;
    if (ours) {
      ASSERT_EQ(ours->dump(), theirs.dump()) << t;
      ++agreed;
    }
  }
  EXPECT_GT(agreed, 100);
}

}  // namespace
}  // namespace sluice
