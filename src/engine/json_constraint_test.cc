#include "engine/json_constraint.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/sampler.h"

namespace sluice {
namespace {

// Feeds `text` byte by byte; the number of bytes accepted (text.size() if all were).
size_t accepted_prefix(JsonState& s, std::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (!s.feed(static_cast<uint8_t>(text[i]))) return i;
  }
  return text.size();
}

TEST(JsonState, AcceptsObjectsAndIsDoneOnlyAtTheirEnd) {
  const std::vector<std::string> docs = {
      "{}",
      " {\"a\": 1}",
      "{\"a\": [1, -2.5e+3, 0, 0.25, 1E-2, true, false, null, \"x\\n\\u00e9\\\"\\/\", {\"b\": {}}], \"c\": []}",
      "{\n  \"name\": \"Lily\",\n  \"age\": 3,\n  \"toys\": [\n    \"ball\"\n  ]\n}\n",
      "{\"utf8\": \"caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80\", \"pair\": \"\\ue000\"}",
  };
  for (const std::string& doc : docs) {
    SCOPED_TRACE(doc);
    JsonState s;
    const size_t end = doc.find_last_of('}') + 1;
    for (size_t i = 0; i < doc.size(); ++i) {
      ASSERT_EQ(s.done(), i >= end) << "after " << i << " bytes";
      ASSERT_TRUE(s.feed(static_cast<uint8_t>(doc[i]))) << "byte " << i;
    }
    EXPECT_TRUE(s.done());
    EXPECT_TRUE(nlohmann::json::parse(doc).is_object());
  }
}

TEST(JsonState, RefusesTheFirstByteThatCannotContinueAnObject) {
  struct Case {
    std::string text;
    size_t accepted;  // bytes accepted before the refusal
  };
  const std::vector<Case> cases = {
      {"[1]", 0},                  // the top level is an object
      {"\"a\"", 0},
      {"{\"a\" 1}", 5},
      {"{a: 1}", 1},
      {"{\"a\": 01}", 7},
      {"{\"a\": 1.}", 8},
      {"{\"a\": .5}", 6},
      {"{\"a\": -}", 7},
      {"{\"a\": 1e}", 8},
      {"{\"a\": True}", 6},
      {"{\"a\": nul}", 9},
      {"{,}", 1},
      {"{\"a\": 1,}", 8},
      {"{\"a\": [1,]}", 9},
      {"{\"a\": [1}", 8},
      {"{\"a\": {\"b\": 1]}", 13},
      {"{\"a\": \"\x01\"}", 7},        // control characters are escaped in JSON strings
      {"{\"a\": \"\\q\"}", 8},
      {"{\"a\": \"\\u12g4\"}", 11},
      {"{\"a\": \"\\ud800\"}", 10},    // no lone surrogate
      {"{\"a\": \"\\uDBFF\"}", 10},
      {"{\"a\": \"\xc0\x80\"}", 7},    // overlong
      {"{\"a\": \"\xed\xa0\x80\"}", 8},  // a surrogate in UTF-8
      {"{\"a\": \"\xf4\x90\x80\x80\"}", 8},  // past U+10FFFF
      {"{\"a\": \"\xe6\x97\"}", 9},    // a character cut short
      {"{\"a\": 1}}", 8},
      {"{\"a\": 1}x", 8},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    JsonState s;
    EXPECT_EQ(accepted_prefix(s, c.text), c.accepted);
  }
}

TEST(JsonState, BoundsNestingAndWhitespaceRuns) {
  std::string deep = "{\"a\":";
  for (int i = 1; i < JsonState::kMaxDepth; ++i) deep += "[";
  JsonState s;
  ASSERT_EQ(accepted_prefix(s, deep), deep.size());
  EXPECT_FALSE(s.feed('['));
  JsonState t;
  EXPECT_EQ(accepted_prefix(t, deep + "{"), deep.size());

  // Whitespace as a pretty-printer writes it: one line break a run, 4 * depth + 1 spaces on
  // each side of it.
  const std::vector<std::pair<std::string, size_t>> runs = {
      {"{      ", 6},                 // depth 1: five spaces, not six
      {"{\n\n", 2},                   // one line break, not two
      {"{\r \n", 2},                  // CR only right before LF
      {" \n {", 4},                   // before the object: depth 0, one space
      {"  {", 1},
      {"{}\n\n", 3},
      {"{\"a\": [\n         1]}", 20},         // depth 2: nine spaces of indentation
      {"{\"a\": [\n          1]}", 7 + 1 + 9},
  };
  for (const auto& [text, accepted] : runs) {
    JsonState w;
    EXPECT_EQ(accepted_prefix(w, text), accepted) << text;
  }
  JsonState v;
  const std::string pretty = "{ \r\n     \"k\" :  1 , \"l\": [\n  2\n ] \n}\n";
  EXPECT_EQ(accepted_prefix(v, pretty), pretty.size());
  EXPECT_TRUE(v.done());
}

// Random JSON objects (nlohmann's serializer, compact and indented) are accepted whole; random
// splices of their bytes are accepted whole only if nlohmann parses them as an object.
TEST(JsonState, AgreesWithAJsonParserOnRandomDocuments) {
  std::mt19937 rng(7);
  auto random_value = [&](auto& self, int depth) -> nlohmann::json {
    const int kind = static_cast<int>(rng() % (depth > 3 ? 5 : 7));
    switch (kind) {
      case 0: return nullptr;
      case 1: return rng() % 2 == 0;
      case 2: return static_cast<int>(rng() % 2001) - 1000;
      case 3: return static_cast<double>(rng() % 100000) / 64.0 - 700.0;
      case 4: {
        const char* words[] = {"a", "Lily", "caf\xc3\xa9", "tab\t", "q\"uote", "", "\xe2\x82\xac", "back\\slash"};
        return words[rng() % 8];
      }
      case 5: {
        nlohmann::json a = nlohmann::json::array();
        for (unsigned n = rng() % 4; n > 0; --n) a.push_back(self(self, depth + 1));
        return a;
      }
      default: {
        nlohmann::json o = nlohmann::json::object();
        for (unsigned n = rng() % 4; n > 0; --n) o[fmt::format("k{}", rng() % 10)] = self(self, depth + 1);
        return o;
      }
    }
  };
  int num_parsed_splices = 0;
  for (int i = 0; i < 400; ++i) {
    nlohmann::json doc = nlohmann::json::object();
    for (unsigned n = rng() % 5; n > 0; --n) doc[fmt::format("f{}", n)] = random_value(random_value, 1);
    const std::string text = doc.dump(i % 2 == 0 ? -1 : 2);
    JsonState whole;
    ASSERT_EQ(accepted_prefix(whole, text), text.size()) << text;
    ASSERT_TRUE(whole.done()) << text;
    // A splice: the start of this document and the end of a random cut of itself.
    // (Compact: an indented splice can join whitespace runs into ones this subset refuses.)
    const std::string compact = doc.dump();
    const size_t a = rng() % (compact.size() + 1), b = rng() % (compact.size() + 1);
    const std::string splice = compact.substr(0, a) + compact.substr(b);
    JsonState s;
    const bool accepted = accepted_prefix(s, splice) == splice.size() && s.done();
    const nlohmann::json parsed = nlohmann::json::parse(splice, nullptr, /*allow_exceptions=*/false);
    const bool valid = !parsed.is_discarded() && parsed.is_object();
    ASSERT_EQ(accepted, valid) << splice;
    num_parsed_splices += valid;
  }
  EXPECT_GT(num_parsed_splices, 0);
}

// A vocabulary of a few pieces: the mask is what feeding each piece to a copy of the state says.
TEST(JsonVocabulary, MasksTheTokensThatCannotContinueAndAdvancesByAcceptedOnes) {
  const std::vector<std::string> pieces = {"", "{", "}", "\"", "a", ":", " 1", "}\n", "[", "{\"", "\":", "x}"};
  auto vocab = std::make_shared<JsonVocabulary>(pieces);
  JsonConstraint c(vocab);
  auto allowed_ids = [&] {
    std::vector<int32_t> ids;
    const auto mask = c.allowed();
    for (int32_t id = 0; id < vocab->size(); ++id) {
      if (mask_allows(*mask, id)) ids.push_back(id);
    }
    return ids;
  };
  EXPECT_EQ(allowed_ids(), (std::vector<int32_t>{1, 9}));          // "{" and "{\""
  c.accept(9);                                                      // {"
  EXPECT_EQ(allowed_ids(), (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 8, 9, 10, 11}));  // a key: not a raw newline
  c.accept(4);
  c.accept(10);                                                     // {"a":
  EXPECT_EQ(allowed_ids(), (std::vector<int32_t>{1, 3, 6, 8, 9, 10}));  // a value ("": starts a string)
  c.accept(6);                                                      // {"a": 1
  EXPECT_EQ(allowed_ids(), (std::vector<int32_t>{2, 7}));
  EXPECT_FALSE(c.done());
  c.accept(7);
  EXPECT_TRUE(c.done());
  EXPECT_EQ(allowed_ids(), (std::vector<int32_t>{}));              // only whitespace could follow
  // A token outside the mask breaks the constraint: nothing is allowed after it.
  JsonConstraint broken(vocab);
  broken.accept(2);
  const auto none = broken.allowed();
  EXPECT_EQ(std::count(none->begin(), none->end(), uint64_t{0}), static_cast<std::ptrdiff_t>(none->size()));
}

TEST(JsonVocabulary, SharedMasksAreComputedOncePerStateAndStayBounded) {
  const std::vector<std::string> pieces = {"{", "}", "]", "[", " ", "1", " ]"};
  auto vocab = std::make_shared<JsonVocabulary>(pieces);
  JsonState start;
  EXPECT_EQ(vocab->mask(start).get(), vocab->mask(start).get());
  // More distinct states (depth x whitespace run) than the memo keeps: every mask is still
  // what trying each piece on a copy of the state says.
  int num_states = 0;
  for (int depth = 1; depth <= 40; ++depth) {
    for (int spaces = 0; spaces <= 8; ++spaces) {
      JsonState s;
      ASSERT_TRUE(s.feed("{\"a\":"));
      for (int i = 0; i < depth; ++i) ASSERT_TRUE(s.feed("["));
      for (int i = 0; i < spaces; ++i) ASSERT_TRUE(s.feed(" "));
      const auto mask = vocab->mask(s);
      for (int32_t id = 0; id < vocab->size(); ++id) {
        JsonState t = s;
        EXPECT_EQ(mask_allows(*mask, id), t.feed(pieces[static_cast<size_t>(id)])) << depth << " " << spaces << " " << id;
      }
      ++num_states;
    }
  }
  EXPECT_GT(num_states, static_cast<int>(JsonVocabulary::kMaxMasks));
}

// The sampler draws only allowed tokens, and reports the constrained distribution's logprobs.
TEST(JsonVocabulary, ConstrainedSamplerNeverDrawsAMaskedToken) {
  const std::vector<std::string> pieces = {"{", "}", "\"k\":", " 1", ",", "x", "", "\"v\"", ":"};
  auto vocab = std::make_shared<JsonVocabulary>(pieces);
  int num_done = 0;
  for (float temperature : {0.0f, 1.0f}) {
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      SamplingParams p;
      p.temperature = temperature;
      p.seed = seed;
      Sampler sampler(p, {});
      sampler.constrain(JsonConstraint(vocab));
      JsonState state;
      std::string out;
      // Logits that favour the tokens that break JSON ("x", the empty one) most.
      const std::vector<float> logits = {0.5f, 0.1f, 0.3f, 0.2f, 0.4f, 5.0f, 6.0f, 0.3f, 0.1f};
      for (int step = 0; step < 40 && !state.done(); ++step) {
        const SampleResult r = sampler.sample(logits);
        ASSERT_TRUE(state.feed(pieces[static_cast<size_t>(r.token_id)])) << out << " + " << pieces[r.token_id];
        EXPECT_TRUE(std::isfinite(r.logprob));
        out += pieces[static_cast<size_t>(r.token_id)];
        sampler.accept(r.token_id);
      }
      if (state.done()) {
        EXPECT_TRUE(nlohmann::json::parse(out).is_object()) << out;
        ++num_done;
      }
    }
  }
  EXPECT_GT(num_done, 0);
}

}  // namespace
}  // namespace sluice
