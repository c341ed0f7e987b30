#include "pair/pair.h"

#include <cmath>
#include <fstream>

#include <gtest/gtest.h>

#include "common/test_paths.h"
#include "engine/sampler.h"
#include "model/loader.h"

namespace sluice::pair {
namespace {

const std::string kQuant = testing::shared_dir() + "/models/quant/llama-d256-s21-";

// One set of random weights in several types: a family of drafts whose agreement with the F32
// target falls as bits fall (../shared/models/quant/README.md: top-1 agreement 93% for Q8_0,
// 81% Q6_K, 42% Q4_K_M, 8% Q2_K over its prompts). pair must find that order, refuse a draft
// with another vocabulary, and its confirmation run must give identical outputs.
TEST(Pair, RanksTheQuantizedFamilyByBits) {
  if (!std::ifstream(kQuant + "F32.gguf")) GTEST_SKIP() << "no " << kQuant << "F32.gguf (the shared models folder is absent)";
  auto target = load_model(kQuant + "F32.gguf");
  ASSERT_TRUE(target) << target.error().message();
  std::vector<LoadedModel> drafts;
  const std::vector<std::string> types{"Q8_0", "Q6_K", "Q4_K_M", "Q2_K"};
  for (const std::string& t : types) {
    auto d = load_model(kQuant + t + ".gguf");
    ASSERT_TRUE(d) << d.error().message();
    drafts.push_back(std::move(*d));
  }
  auto other = load_model(testing::shared_dir() + "/models/stories260K.gguf");
  ASSERT_TRUE(other);
  ThreadPool pool(2);
  PairOptions opts{.max_tokens = 24, .max_k = 4, .batch_sizes = {1, 4}};
  std::vector<std::vector<int32_t>> prompts;
  for (const char* p : {"The quick brown fox", "Once upon a time, in a land far away", "import numpy as np\n"}) {
    prompts.push_back(*target->tokenizer->encode(p));
  }
  auto outputs = target_outputs(*target->model, *target->tokenizer, pool, prompts, opts);
  ASSERT_TRUE(outputs) << outputs.error().message();
  std::vector<Candidate> cands;
  for (size_t i = 0; i < types.size(); ++i) cands.push_back({.name = types[i], .model = drafts[i].model.get(), .tokenizer = drafts[i].tokenizer.get()});
  cands.push_back({.name = "ngram", .ngram_min = 1});
  cands.push_back({.name = "stories260K", .model = other->model.get(), .tokenizer = other->tokenizer.get()});
  const TargetCosts costs = measure_target_costs(*target->model, pool, 40, opts);
  for (Candidate& c : cands) {
    measure_acceptance(*target->model, *target->tokenizer, pool, prompts, *outputs, opts, c);
    if (!c.refused.empty()) continue;
    measure_draft_costs(pool, 40, opts, c);
    predict_speedup(costs, opts, c);
    EXPECT_EQ(c.positions, 3 * 24);
    ASSERT_EQ(c.accepted_at.size(), 4u);
    for (size_t j = 1; j < 4; ++j) EXPECT_LE(c.accepted_at[j], c.accepted_at[j - 1] + 1e-12) << c.name;
    EXPECT_NEAR(c.accepted_at[0], c.acceptance, 1e-9) << c.name;
    for (size_t b = 0; b < 2; ++b) {
      EXPECT_GE(c.speedup[b], 1.0);
      EXPECT_GE(c.best_k[b], 0);
      EXPECT_LE(c.best_k[b], 4);
    }
  }
  // Agreement falls with the bits.
  for (size_t i = 1; i < types.size(); ++i) {
    EXPECT_GT(cands[i - 1].acceptance, cands[i].acceptance) << types[i - 1] << " vs " << types[i];
  }
  EXPECT_GT(cands[0].acceptance, 0.8);
  EXPECT_LT(cands[3].acceptance, 0.3);
  EXPECT_NE(cands.back().refused.find("differ in kind"), std::string::npos) << cands.back().refused;
  // End to end: the outputs are those without speculation.
  ASSERT_TRUE(confirm(*target->model, *target->tokenizer, pool, prompts, opts, cands[0]));
  EXPECT_TRUE(cands[0].outputs_identical.value());
  EXPECT_GT(*cands[0].confirmed_on, 0);
  rank(cands);
  EXPECT_EQ(cands.back().name, "stories260K");  // refused ones last
}

// At a temperature, both acceptance figures; sum min(p, q) of a model with itself is 1.
TEST(Pair, SampledAcceptanceOfTheTargetItselfIsOne) {
  if (!std::ifstream(kQuant + "Q8_0.gguf")) GTEST_SKIP() << "no " << kQuant << "Q8_0.gguf";
  auto target = load_model(kQuant + "Q8_0.gguf");
  auto same = load_model(kQuant + "Q8_0.gguf");
  ASSERT_TRUE(target && same);
  ThreadPool pool(2);
  PairOptions opts{.temperature = 0.8f, .max_tokens = 16, .max_k = 3, .batch_sizes = {1}};
  std::vector<std::vector<int32_t>> prompts{*target->tokenizer->encode("The quick brown fox")};
  auto outputs = target_outputs(*target->model, *target->tokenizer, pool, prompts, opts);
  ASSERT_TRUE(outputs);
  Candidate c{.name = "self", .model = same->model.get(), .tokenizer = same->tokenizer.get()};
  measure_acceptance(*target->model, *target->tokenizer, pool, prompts, *outputs, opts, c);
  EXPECT_NEAR(c.acceptance_min_pq, 1.0, 1e-6);
  // sluice's rule: the target's own draws pick the same token from the same distribution.
  EXPECT_NEAR(c.acceptance, 1.0, 1e-6);
}

// The race's agreement, computed in closed form by pair, against the sampler itself: two samplers
// with one seed, one fed p's logits and one q's, agree as often as predicted.
TEST(Pair, RaceAgreementMatchesTheSampler) {
  std::vector<float> zp, zq;
  Xoshiro256 rng(5);
  for (int i = 0; i < 50; ++i) {
    zp.push_back(static_cast<float>(3 * rng.next_double()));
    zq.push_back(zp.back() + static_cast<float>(1.5 * (rng.next_double() - 0.5)));
  }
  auto softmax = [](const std::vector<float>& z) {
    std::vector<double> w;
    double sum = 0;
    for (float x : z) sum += std::exp(static_cast<double>(x));
    for (float x : z) w.push_back(std::exp(static_cast<double>(x)) / sum);
    return w;
  };
  const std::vector<double> p = softmax(zp), q = softmax(zq);
  const double predicted = race_agreement(p, q);
  double min_pq = 0;
  for (size_t i = 0; i < p.size(); ++i) min_pq += std::min(p[i], q[i]);
  SamplingParams params;
  params.temperature = 1;
  params.seed = 9;
  Sampler a(params, {}), b(params, {});
  constexpr int kDraws = 20000;
  int same = 0;
  for (int i = 0; i < kDraws; ++i) same += a.pick(zp) == b.pick(zq);
  const double measured = static_cast<double>(same) / kDraws;
  EXPECT_NEAR(measured, predicted, 4 * std::sqrt(predicted * (1 - predicted) / kDraws));
  // Below the rule with the full q, and above the bound for a coupling without communication,
  // (1 - TV) / (1 + TV) with 1 - TV = sum min(p, q).
  EXPECT_LT(predicted, min_pq);
  EXPECT_GT(predicted, min_pq / (2 - min_pq));
  EXPECT_NEAR(race_agreement(p, p), 1.0, 1e-9);
}

}  // namespace
}  // namespace sluice::pair
