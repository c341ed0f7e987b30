// Shadow traffic's pieces without a network: reading answers (whole and streamed, completions
// and chat), the comparison of two answers, and the store's retention and report.
#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "router/rollout.h"
#include "router/shadow_compare.h"
#include "router/shadow_store.h"

namespace sluice::router {
namespace {

using Json = nlohmann::ordered_json;

// A completion answer with logprobs: tokens' texts, their logprobs, and the finish reason.
std::string completion(const std::vector<std::string>& tokens, const std::vector<double>& lps, std::string finish) {
  Json offsets = Json::array(), names = Json::array();
  std::string text;
  for (const std::string& t : tokens) {
    offsets.push_back(text.size() + 7);  // offsets need not start at 0 (an echoed prompt before)
    names.push_back(t);
    text += t;
  }
  Json choice = {{"index", 0}, {"text", text}, {"finish_reason", finish}};
  if (!lps.empty()) choice["logprobs"] = {{"tokens", names}, {"token_logprobs", lps}, {"text_offset", offsets}};
  return Json{{"choices", Json::array({choice})}, {"usage", {{"completion_tokens", tokens.size()}}}}.dump();
}

TEST(ShadowAnswer, ReadsWholeAndStreamedCompletionsAndChatsAlike) {
  const ShadowAnswer whole = read_answer(200, completion({"Once", " upon", " a"}, {-0.1, -0.2, -0.3}, "length"), false);
  ASSERT_TRUE(whole.ok) << whole.error;
  EXPECT_EQ(whole.text, "Once upon a");
  EXPECT_EQ(whole.finish_reason, "length");
  EXPECT_EQ(whole.token_ends, (std::vector<size_t>{4, 9, 11}));
  EXPECT_EQ(whole.logprobs, (std::vector<double>{-0.1, -0.2, -0.3}));
  EXPECT_EQ(whole.completion_tokens, 3);

  const std::string stream =
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Once\"},\"logprobs\":{\"content\":[{\"token\":\"Once\","
      "\"logprob\":-0.5,\"bytes\":[79,110,99,101]}]}}]}\n\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" up\"},\"logprobs\":{\"content\":[{\"token\":\" up\","
      "\"logprob\":-0.25,\"bytes\":[32,117,112]}]},\"finish_reason\":\"stop\"}]}\n\n"
      "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\n"
      "data: [DONE]\n\n";
  const ShadowAnswer streamed = read_answer(200, stream, true);
  ASSERT_TRUE(streamed.ok) << streamed.error;
  EXPECT_EQ(streamed.text, "Once up");
  EXPECT_EQ(streamed.finish_reason, "stop");
  EXPECT_EQ(streamed.token_ends, (std::vector<size_t>{4, 7}));
  EXPECT_EQ(streamed.logprobs, (std::vector<double>{-0.5, -0.25}));

  // The same stream with CRLF line ends (sse-starlette's), as the router relays and captures it:
  // its events were not found, and every pair dropped as "the stream ended before [DONE]".
  std::string crlf;
  for (char c : stream) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
  const ShadowAnswer from_crlf = read_answer(200, crlf, true);
  ASSERT_TRUE(from_crlf.ok) << from_crlf.error;
  EXPECT_EQ(from_crlf.text, "Once up");
  EXPECT_EQ(from_crlf.logprobs, streamed.logprobs);

  const ShadowAnswer cut = read_answer(200, stream.substr(0, stream.find("data: [DONE]")), true);
  EXPECT_FALSE(cut.ok);
  EXPECT_NE(cut.error.find("[DONE]"), std::string::npos);
  const ShadowAnswer failed = read_answer(500, R"({"error":{"message":"boom"}})", false);
  EXPECT_FALSE(failed.ok);
  EXPECT_EQ(failed.error, "HTTP 500");
  const ShadowAnswer broken_stream = read_answer(
      200, "data: {\"choices\":[{\"index\":0,\"text\":\"x\",\"finish_reason\":\"error\"}],\"error\":{}}\n\ndata: [DONE]\n\n", true);
  EXPECT_FALSE(broken_stream.ok);
  EXPECT_FALSE(read_answer(200, "not json", false).ok);
}

TEST(ShadowCompare, IdenticalAnswersMatchExactly) {
  const ShadowAnswer a = read_answer(200, completion({"a", "b"}, {-1, -2}, "stop"), false);
  const ShadowComparison c = compare_answers(a, a, false);
  EXPECT_TRUE(c.exact);
  EXPECT_TRUE(c.agrees);
  EXPECT_EQ(c.first_diff_byte, -1);
  EXPECT_EQ(c.first_diff_token, -1);
  EXPECT_EQ(c.edit_distance, 0);
  EXPECT_EQ(c.length_ratio, 1);
  ASSERT_TRUE(c.has_logprob_gap);
  EXPECT_EQ(c.logprob_gap, 0);
}

TEST(ShadowCompare, FindsTheFirstDifferingTokenAndTheGapOnTheTokensBothSampled) {
  const ShadowAnswer primary = read_answer(200, completion({"The", " cat", " sat", "."}, {-1, -2, -3, -4}, "stop"), false);
  const ShadowAnswer shadow = read_answer(200, completion({"The", " cat", " ran", "."}, {-1.5, -2.5, -0.5, -4}, "stop"), false);
  const ShadowComparison c = compare_answers(primary, shadow, false);
  EXPECT_FALSE(c.exact);
  EXPECT_FALSE(c.agrees);
  EXPECT_EQ(c.first_diff_byte, 8);  // "The cat " then 's' vs 'r'
  EXPECT_EQ(c.first_diff_token, 2);
  EXPECT_NEAR(c.edit_distance, 2.0 / 12.0, 1e-12);  // "sat" -> "ran": two substitutions in 12 characters
  EXPECT_EQ(c.length_ratio, 1);
  ASSERT_TRUE(c.has_logprob_gap);
  EXPECT_NEAR(c.logprob_gap, -0.5, 1e-12);  // over "The" and " cat" only
  // The primary without logprobs (the client did not ask): the shadow's tokens place the difference.
  ShadowAnswer bare = primary;
  bare.token_ends.clear();
  bare.logprobs.clear();
  const ShadowComparison d = compare_answers(bare, shadow, false);
  EXPECT_EQ(d.first_diff_token, 2);
  EXPECT_FALSE(d.has_logprob_gap);
}

TEST(ShadowCompare, SampledAnswersAreComparedByScoreNotText) {
  ShadowAnswer p, s;
  p.ok = s.ok = true;
  p.text = "one two three four";
  s.text = "five six seven eight";
  p.finish_reason = s.finish_reason = "length";
  EXPECT_TRUE(compare_answers(p, s, true).agrees);
  EXPECT_FALSE(compare_answers(p, s, false).agrees);
  s.finish_reason = "stop";
  EXPECT_FALSE(compare_answers(p, s, true).agrees);  // a different ending
  s.finish_reason = "length";
  s.text = "five";
  EXPECT_FALSE(compare_answers(p, s, true).agrees);  // a quarter of the length
  // JSON: when the primary's answer is a JSON document, the shadow's must be one too.
  p.text = R"({"a": 1})";
  s.text = R"({"b": 2})";
  EXPECT_TRUE(compare_answers(p, s, true).agrees);
  s.text = R"({"b": 2)";
  const ShadowComparison j = compare_answers(p, s, true);
  EXPECT_TRUE(j.primary_json);
  EXPECT_FALSE(j.shadow_json);
  EXPECT_FALSE(j.agrees);
  // Sampled without a seed: temperature above 0 or unset (OpenAI's default is 1), and no seed.
  EXPECT_TRUE(sampled_without_seed(Json::parse(R"({"prompt":"x"})")));
  EXPECT_TRUE(sampled_without_seed(Json::parse(R"({"prompt":"x","temperature":0.7})")));
  EXPECT_FALSE(sampled_without_seed(Json::parse(R"({"prompt":"x","temperature":0})")));
  EXPECT_FALSE(sampled_without_seed(Json::parse(R"({"prompt":"x","temperature":1,"seed":3})")));
}

TEST(ShadowCompare, EditDistanceCountsCodePoints) {
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("naïve", "naive"), 1u);  // one code point, two bytes
  EXPECT_EQ(edit_distance("日本語", "日本"), 1u);
  EXPECT_EQ(edit_distance(std::string(5000, 'a'), std::string(5000, 'b'), 100), 100u);  // bounded work
}

TEST(ShadowConfigParse, ReadsTheFieldsAndRefusesWhatCannotBe) {
  auto c = parse_shadow(nlohmann::json::parse(R"({"version":"v2","fraction":0.25,"by":"session","noiseFraction":0.1,
                                                 "maxInFlight":4,"timeout":"2m","retention":100})"),
                        "shadow", false);
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->version, "v2");
  EXPECT_EQ(c->fraction, 0.25);
  EXPECT_TRUE(c->by_session);
  EXPECT_EQ(c->noise_fraction, 0.1);
  EXPECT_EQ(c->max_in_flight, 4);
  EXPECT_EQ(c->timeout_seconds, 120);
  EXPECT_EQ(c->retention, 100);
  auto again = parse_shadow(to_json(*c), "shadow", false);
  ASSERT_TRUE(again);
  EXPECT_EQ(to_json(*again), to_json(*c));
  for (const char* bad : {R"({"version":"v2","fraction":2})", R"({"fraction":0.5})", R"({"version":"v2","by":"user"})",
                          R"({"version":"v2","fraction":0.1,"mirror":true})", R"({"version":"v2","maxInFlight":0})"}) {
    EXPECT_FALSE(parse_shadow(nlohmann::json::parse(bad), "shadow", false)) << bad;
  }
  EXPECT_FALSE(parse_shadow(nlohmann::json::parse(R"({"version":"v2"})"), "rollout.shadow", true));
  auto spec = parse_rollout(nlohmann::json::parse(
      R"({"name":"r","stable":"v1","candidate":"v2","shadow":{"fraction":1},"analysis":{"minShadowPairs":3}})"));
  ASSERT_TRUE(spec) << spec.error().message();
  EXPECT_EQ(spec->shadow.fraction, 1);
  EXPECT_EQ(spec->analysis.min_shadow_pairs, 3);
  auto round = parse_rollout(to_json(*spec));
  ASSERT_TRUE(round) << round.error().message();
  EXPECT_EQ(to_json(*round), to_json(*spec));
}

TEST(ShadowConfigParse, SessionsAreMirroredAllOrNothingAndApartFromTheCanarySplit) {
  int mirrored_sessions = 0, canary_and_mirrored = 0;
  for (int i = 0; i < 2000; ++i) {
    const std::string s = fmt::format("session-{}", i);
    const bool m = mirrored(s, 0, 0.2, true);
    for (uint64_t r : {1ull, 77ull, 9999ull}) EXPECT_EQ(mirrored(s, r, 0.2, true), m);  // not per request
    mirrored_sessions += m;
    canary_and_mirrored += m && assigned_to_candidate(s, 20);
  }
  EXPECT_GT(mirrored_sessions, 300);
  EXPECT_LT(mirrored_sessions, 500);
  // Independent of the canary's assignment: about 20% of the mirrored ones are canaries too.
  EXPECT_GT(canary_and_mirrored, 30);
  EXPECT_LT(canary_and_mirrored, 130);
  int requests = 0;
  for (uint64_t r = 0; r < 10000; ++r) requests += mirrored("", r * 7919, 0.1, true);
  EXPECT_EQ(requests, 1000);
}

ShadowPair pair_of(std::string arm, std::string primary, std::string shadow, double at) {
  ShadowPair p;
  p.at = at;
  p.arm = std::move(arm);
  p.primary_version = "v1";
  p.shadow_version = p.arm == "noise" ? "v1" : "v2";
  p.target = "/v1/completions";
  p.request = R"({"prompt":"x","temperature":0})";
  p.primary.ok = p.shadow.ok = true;
  p.primary.text = std::move(primary);
  p.shadow.text = std::move(shadow);
  p.primary.finish_reason = p.shadow.finish_reason = "stop";
  p.comparison = compare_answers(p.primary, p.shadow, false);
  return p;
}

TEST(ShadowStore, KeepsTheNewestPairsAndReportsRatesHistogramsAndTheWorst) {
  const std::string path = ::testing::TempDir() + "/shadow_store.db";
  std::filesystem::remove(path);
  auto store = ShadowStore::open(path);
  ASSERT_TRUE(store) << store.error().message();
  // 300 pairs kept at most 100 (+ the trim's slack of 64): the oldest go.
  for (int i = 0; i < 300; ++i) {
    const bool differs = i % 4 == 0;
    ASSERT_TRUE((*store)->record(pair_of("candidate", "the same answer", differs ? "another answer" : "the same answer",
                                         1000 + i),
                                 100));
  }
  for (int i = 0; i < 50; ++i) ASSERT_TRUE((*store)->record(pair_of("noise", "abc", i % 10 == 0 ? "abd" : "abc", 1300 + i), 100));
  ShadowPair failed = pair_of("candidate", "x", "", 1400);
  failed.shadow.ok = false;
  failed.shadow.status = 503;
  failed.shadow.error = "HTTP 503";
  ASSERT_TRUE((*store)->record(failed, 100));
  auto report = (*store)->report({.worst = 3, .bucket_seconds = 100});
  ASSERT_TRUE(report) << report.error().message();
  const Json& r = *report;
  EXPECT_LE(r["pairs"].get<int64_t>(), 164);
  EXPECT_GE(r["pairs"].get<int64_t>(), 100);
  const Json& noise = r["arms"]["noise"];
  EXPECT_EQ(noise["pairs"], 50);
  EXPECT_DOUBLE_EQ(noise["disagreement_rate"].get<double>(), 0.1);
  EXPECT_DOUBLE_EQ(noise["exact_match_rate"].get<double>(), 0.9);
  const Json& cand = r["arms"]["candidate"];
  EXPECT_EQ(cand["shadow_errors"], 1);
  const double cand_rate = cand["disagreement_rate"].get<double>();
  EXPECT_GT(cand_rate, 0.24);
  EXPECT_LT(cand_rate, 0.30);
  EXPECT_NEAR(r["excess_disagreement"].get<double>(), cand_rate - 0.1, 1e-12);
  int64_t in_hist = 0;
  for (const Json& b : cand["edit_distance"]["histogram"]) in_hist += b["pairs"].get<int64_t>();
  EXPECT_EQ(in_hist, cand["answered"].get<int64_t>());
  // The worst: the failed shadow answer first, then the most differing, both outputs shown.
  ASSERT_EQ(r["worst"].size(), 3u);
  EXPECT_EQ(r["worst"][0]["shadow"]["error"], "HTTP 503");
  EXPECT_EQ(r["worst"][1]["primary"]["text"], "the same answer");
  EXPECT_EQ(r["worst"][1]["shadow"]["text"], "another answer");
  EXPECT_EQ(r["worst"][1]["request"], R"({"prompt":"x","temperature":0})");
  // The timeline: agreement per bucket of 100 s.
  ASSERT_FALSE(r["timeline"].empty());
  EXPECT_DOUBLE_EQ(r["timeline"].back()["start"].get<double>(), 1400);
  // Filters: by version and time.
  auto noise_only = (*store)->report({.version = "v1"});
  ASSERT_TRUE(noise_only);
  EXPECT_EQ((*noise_only)["arms"]["candidate"]["pairs"], 0);
  // The candidate pairs by shadow version.
  ASSERT_EQ(r["candidate_versions"].size(), 1u) << r["candidate_versions"].dump();
  EXPECT_EQ(r["candidate_versions"].begin()->get<int64_t>(), cand["pairs"].get<int64_t>());
  auto late = (*store)->report({.since = 1350});
  ASSERT_TRUE(late);
  EXPECT_EQ((*late)["pairs"], 1);
}

TEST(ShadowStore, OpensInMemoryAndRefusesAPathItCannotWrite) {
  auto memory = ShadowStore::open(":memory:");
  ASSERT_TRUE(memory) << memory.error().message();
  EXPECT_TRUE((*memory)->record(pair_of("candidate", "a", "a", 1), 10));
  auto bad = ShadowStore::open("/nonexistent-dir/shadow.db");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("/nonexistent-dir/shadow.db"), std::string::npos) << bad.error().message();
}

}  // namespace
}  // namespace sluice::router
