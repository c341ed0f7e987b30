#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

namespace sluice {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

SamplingParams sampling(float temperature, uint64_t seed = 1) {
  SamplingParams p;
  p.temperature = temperature;
  p.seed = seed;
  return p;
}

// Logits whose softmax at temperature 1 is `probs`.
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

// How often each token is drawn in `num_draws` steps on the same logits.
std::vector<int> histogram(Sampler& sampler, const std::vector<float>& logits, int num_draws) {
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < num_draws; ++i) ++counts[sampler.sample(logits).token_id];
  return counts;
}

// Pearson chi-square of `counts` against `probs` (cells with p == 0 must be empty).
double chi_square(const std::vector<int>& counts, const std::vector<double>& probs) {
  double total = 0;
  for (int c : counts) total += c;
  double chi2 = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (probs[i] == 0) {
      if (counts[i] != 0) return std::numeric_limits<double>::infinity();
      continue;
    }
    const double expected = probs[i] * total;
    chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  return chi2;
}

std::vector<double> softmax(const std::vector<float>& logits, double temperature) {
  std::vector<double> p;
  double sum = 0;
  for (float z : logits) sum += std::exp(z / temperature);
  for (float z : logits) p.push_back(std::exp(z / temperature) / sum);
  return p;
}

std::vector<float> random_logits(Xoshiro256& rng, int vocab, double scale) {
  std::vector<float> logits(vocab);
  for (float& z : logits) z = static_cast<float>((rng.next_double() - 0.5) * scale);
  return logits;
}

TEST(Sampler, GreedyPicksArgmaxWithLogSoftmaxLogprob) {
  Sampler sampler(sampling(0.0f), {});
  const std::vector<float> logits = {0.1f, 3.0f, -2.0f, 2.9f};
  const SampleResult r = sampler.sample(logits);
  EXPECT_EQ(r.token_id, 1);
  EXPECT_NEAR(r.logprob, std::log(softmax(logits, 1.0)[1]), 1e-6);
}

TEST(Sampler, GreedyBreaksTiesByLowestId) {
  Sampler sampler(sampling(0.0f), {});
  EXPECT_EQ(sampler.sample(std::vector<float>{0.0f, 5.0f, 1.0f, 5.0f, 5.0f}).token_id, 1);
}

TEST(Sampler, SplitMix64MatchesReferenceVector) {
  uint64_t state = 0;
  EXPECT_EQ(Xoshiro256::splitmix64(state), 0xe220a8397b1dcdafULL);
}

TEST(Sampler, SameSeedGivesSameSequence) {
  Xoshiro256 data_rng(7);
  const std::vector<float> logits = random_logits(data_rng, 64, 4.0);
  Sampler a(sampling(1.0f, 1234), {});
  Sampler b(sampling(1.0f, 1234), {});
  Sampler c(sampling(1.0f, 1235), {});
  int num_differ = 0;
  for (int i = 0; i < 200; ++i) {
    const int32_t token = a.sample(logits).token_id;
    EXPECT_EQ(token, b.sample(logits).token_id) << "draw " << i;
    num_differ += token != c.sample(logits).token_id;
  }
  EXPECT_GT(num_differ, 50);
}

// Golden draws, cross-checked with an independent Python xoshiro256** and race: the generator
// and the race are specified, so these ids hold on every platform and standard library. A change here
// breaks reproducibility of users' seeds.
TEST(Sampler, SeededDrawsAreStableAcrossBuilds) {
  const std::vector<float> logits = logits_of({0.1, 0.2, 0.3, 0.4});
  Sampler sampler(sampling(1.0f, 42), {});
  std::vector<int32_t> tokens;
  for (int i = 0; i < 12; ++i) tokens.push_back(sampler.sample(logits).token_id);
  EXPECT_EQ(tokens, (std::vector<int32_t>{1, 3, 3, 3, 0, 3, 3, 1, 1, 1, 2, 3}));
}

TEST(Sampler, TemperatureShapesDistribution) {
  const std::vector<float> logits = {1.0f, 0.5f, 0.0f, -1.0f};
  for (float temperature : {0.5f, 1.0f, 2.0f}) {
    Sampler sampler(sampling(temperature, 99), {});
    const std::vector<int> counts = histogram(sampler, logits, 20000);
    // 3 degrees of freedom: P(chi2 > 20) < 2e-4.
    EXPECT_LT(chi_square(counts, softmax(logits, temperature)), 20.0) << "T=" << temperature;
    // The neighbouring temperature is clearly rejected, so the bound has power.
    EXPECT_GT(chi_square(counts, softmax(logits, temperature * 1.5)), 100.0) << "T=" << temperature;
  }
}

TEST(Sampler, TopKOneEqualsGreedy) {
  Xoshiro256 data_rng(3);
  SamplingParams params = sampling(1.5f, 5);
  params.top_k = 1;
  Sampler top1(params, {});
  Sampler greedy(sampling(0.0f), {});
  for (int step = 0; step < 50; ++step) {
    const std::vector<float> logits = random_logits(data_rng, 1000, 2.0);
    EXPECT_EQ(top1.sample(logits).token_id, greedy.sample(logits).token_id);
  }
}

TEST(Sampler, TopKSamplesOnlyTheKBest) {
  //   id:   0     1     2     3     4
  //   p:  0.10  0.35  0.05  0.30  0.20   top_k=2 keeps {1, 3}, renormalised 0.538 / 0.462
  SamplingParams params = sampling(1.0f, 11);
  params.top_k = 2;
  Sampler sampler(params, {});
  const std::vector<int> counts =
      histogram(sampler, logits_of({0.10, 0.35, 0.05, 0.30, 0.20}), 10000);
  EXPECT_LT(chi_square(counts, {0, 0.35 / 0.65, 0, 0.30 / 0.65, 0}), 15.0);
}

TEST(Sampler, TopPKeepsMinimalNucleus) {
  //   id:   0     1     2     3
  //   p:  0.15  0.50  0.05  0.30
  // Sorted: 1 (0.50), 3 (0.80 cumulative) -> top_p=0.75 keeps {1, 3}; 0.81 adds 0.
  const std::vector<float> logits = logits_of({0.15, 0.50, 0.05, 0.30});
  SamplingParams params = sampling(1.0f, 21);
  params.top_p = 0.75f;
  Sampler two(params, {});
  EXPECT_LT(chi_square(histogram(two, logits, 10000), {0, 0.625, 0, 0.375}), 15.0);
  params.top_p = 0.81f;
  Sampler three(params, {});
  EXPECT_LT(chi_square(histogram(three, logits, 10000), {0.15 / 0.95, 0.50 / 0.95, 0, 0.30 / 0.95}),
            15.0);
}

TEST(Sampler, MinPDropsTokensBelowFractionOfMax) {
  //   p: 0.50 0.30 0.15 0.05; min_p=0.25 -> threshold 0.125 keeps {0, 1, 2}
  SamplingParams params = sampling(1.0f, 31);
  params.min_p = 0.25f;
  Sampler sampler(params, {});
  const std::vector<int> counts = histogram(sampler, logits_of({0.50, 0.30, 0.15, 0.05}), 10000);
  EXPECT_LT(chi_square(counts, {0.50 / 0.95, 0.30 / 0.95, 0.15 / 0.95, 0}), 15.0);
}

TEST(Sampler, TopPIsAppliedBeforeMinP) {
  //   p: 0.5 0.3 0.2. top_p=0.6 keeps {0, 1}; min_p=0.5 (threshold 0.25) keeps both.
  // Applying min_p first would renormalise to 0.625 / 0.375 and top_p would keep {0} only.
  SamplingParams params = sampling(1.0f, 41);
  params.top_p = 0.6f;
  params.min_p = 0.5f;
  Sampler sampler(params, {});
  const std::vector<int> counts = histogram(sampler, logits_of({0.5, 0.3, 0.2}), 10000);
  EXPECT_LT(chi_square(counts, {0.625, 0.375, 0}), 15.0);
}

// Log-probs of all tokens, to compare against hand-penalized logits.
std::vector<float> all_logprobs(Sampler& sampler, const std::vector<float>& logits) {
  const SampleResult r = sampler.sample(logits);
  std::vector<float> out(logits.size(), -kInf);
  for (const TokenLogprob& t : r.top) out[t.token_id] = t.logprob;
  return out;
}

void expect_logprobs_of(const std::vector<float>& actual, const std::vector<float>& penalized) {
  const std::vector<double> p = softmax(penalized, 1.0);
  ASSERT_EQ(actual.size(), p.size());
  for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(actual[i], std::log(p[i]), 1e-5) << i;
}

TEST(Sampler, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  // Prompt has 0 and 2; 3 is generated. rep=2: 2.0 -> 1.0, -1.0 -> -2.0, 0.5 -> 0.25.
  SamplingParams params = sampling(0.0f);
  params.repetition_penalty = 2.0f;
  params.top_logprobs = 4;
  Sampler sampler(params, std::vector<int32_t>{0, 2, 0});
  sampler.accept(3);
  const std::vector<float> logits = {2.0f, 1.5f, -1.0f, 0.5f};
  expect_logprobs_of(all_logprobs(sampler, logits), {1.0f, 1.5f, -2.0f, 0.25f});
  EXPECT_EQ(sampler.sample(logits).token_id, 1);
}

TEST(Sampler, PresencePenaltyCountsGeneratedTokensOnce) {
  // Generated 1 twice; the prompt token 0 is not penalized. presence=0.6: 1.5 -> 0.9.
  SamplingParams params = sampling(0.0f);
  params.presence_penalty = 0.6f;
  params.top_logprobs = 4;
  Sampler sampler(params, std::vector<int32_t>{0});
  sampler.accept(1);
  sampler.accept(1);
  expect_logprobs_of(all_logprobs(sampler, {2.0f, 1.5f, -1.0f, 0.5f}),
                     {2.0f, 0.9f, -1.0f, 0.5f});
}

TEST(Sampler, FrequencyPenaltyScalesWithCount) {
  // Generated 1, 1, 3. frequency=0.4: 1.5 - 0.8 = 0.7, 0.5 - 0.4 = 0.1.
  SamplingParams params = sampling(0.0f);
  params.frequency_penalty = 0.4f;
  params.top_logprobs = 4;
  Sampler sampler(params, {});
  for (int32_t t : {1, 1, 3}) sampler.accept(t);
  expect_logprobs_of(all_logprobs(sampler, {2.0f, 1.5f, -1.0f, 0.5f}),
                     {2.0f, 0.7f, -1.0f, 0.1f});
}

TEST(Sampler, RepetitionAppliesBeforePresenceAndFrequency) {
  // Token 0 generated once: 2.0 / 2 - 0.5 - 0.25 = 0.25 (not (2.0 - 0.75) / 2 = 0.625).
  SamplingParams params = sampling(0.0f);
  params.repetition_penalty = 2.0f;
  params.presence_penalty = 0.5f;
  params.frequency_penalty = 0.25f;
  params.top_logprobs = 3;
  Sampler sampler(params, {});
  sampler.accept(0);
  expect_logprobs_of(all_logprobs(sampler, {2.0f, 0.5f, 0.0f}), {0.25f, 0.5f, 0.0f});
}

TEST(Sampler, SampleDoesNotAcceptByItself) {
  SamplingParams params = sampling(0.0f);
  params.frequency_penalty = 2.0f;
  Sampler sampler(params, {});
  const std::vector<float> logits = {1.0f, 0.0f};
  EXPECT_EQ(sampler.sample(logits).token_id, 0);
  EXPECT_EQ(sampler.sample(logits).token_id, 0);
  sampler.accept(0);
  EXPECT_EQ(sampler.sample(logits).token_id, 1);
}

TEST(Sampler, TopLogprobsAreSortedNormalisedAndIgnoreSamplingKnobs) {
  const std::vector<float> logits = {0.5f, 2.0f, 0.5f, -1.0f, 1.0f};
  SamplingParams params = sampling(1.7f, 8);
  params.top_k = 2;
  params.top_p = 0.5f;
  params.top_logprobs = 5;
  Sampler sampler(params, {});
  const SampleResult r = sampler.sample(logits);
  ASSERT_EQ(r.top.size(), 5u);
  std::vector<int32_t> order;
  double mass = 0;
  for (const TokenLogprob& t : r.top) {
    order.push_back(t.token_id);
    mass += std::exp(t.logprob);
  }
  EXPECT_EQ(order, (std::vector<int32_t>{1, 4, 0, 2, 3}));  // 0 and 2 tie: lower id first
  EXPECT_NEAR(mass, 1.0, 1e-6);
  // Temperature 1.7 and the filters do not change what is reported.
  expect_logprobs_of(all_logprobs(sampler, logits), logits);
  auto chosen = std::find_if(r.top.begin(), r.top.end(),
                             [&](const TokenLogprob& t) { return t.token_id == r.token_id; });
  ASSERT_NE(chosen, r.top.end());
  EXPECT_EQ(chosen->logprob, r.logprob);
}

TEST(Sampler, TopLogprobsListsOnlyTokensWithNonzeroProbability) {
  SamplingParams params = sampling(0.0f);
  params.top_logprobs = 4;
  Sampler sampler(params, {});
  const SampleResult r = sampler.sample(std::vector<float>{-kInf, 1.0f, -kInf});
  ASSERT_EQ(r.top.size(), 1u);
  EXPECT_EQ(r.top[0].token_id, 1);
  EXPECT_EQ(r.top[0].logprob, 0.0f);
}

TEST(Sampler, NanIsNeverChosen) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> logits = {nan, -3.0f, nan, -4.0f};
  Sampler greedy(sampling(0.0f), {});
  EXPECT_EQ(greedy.sample(logits).token_id, 1);
  Sampler hot(sampling(2.0f, 3), {});
  const std::vector<int> counts = histogram(hot, logits, 2000);
  EXPECT_EQ(counts[0] + counts[2], 0);
  EXPECT_GT(counts[3], 0);
}

TEST(Sampler, NoUsableLogitFallsBackToUniform) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  SamplingParams params = sampling(1.0f);
  params.top_logprobs = 2;
  Sampler sampler(params, {});
  const SampleResult r = sampler.sample(std::vector<float>{nan, -kInf, nan, -kInf});
  EXPECT_EQ(r.token_id, 0);
  EXPECT_FLOAT_EQ(r.logprob, -std::log(4.0f));
  ASSERT_EQ(r.top.size(), 2u);
  EXPECT_EQ(r.top[1].token_id, 1);
}

// Suppressed tokens (min_tokens) stay out of every draw, the fallback's included; once the
// suppression ends they come back.
TEST(Sampler, SuppressedTokensAreNeverDrawnUntilTheSuppressionEnds) {
  SamplingParams params = sampling(0.0f);
  params.top_logprobs = 2;
  Sampler sampler(params, {});
  sampler.suppress_until({2, 0}, 1);
  const SampleResult r = sampler.sample(std::vector<float>{5.0f, 1.0f, 9.0f, 0.5f});
  EXPECT_EQ(r.token_id, 1);
  ASSERT_EQ(r.top.size(), 2u);
  EXPECT_EQ(r.top[0].token_id, 1);
  EXPECT_EQ(r.top[1].token_id, 3);
  const SampleResult none = sampler.sample(std::vector<float>{1.0f, -kInf, 2.0f, -kInf});
  EXPECT_EQ(none.token_id, 1);  // only suppressed tokens are usable: uniform over the others
  EXPECT_FLOAT_EQ(none.logprob, -std::log(2.0f));
  sampler.accept(r.token_id);
  EXPECT_EQ(sampler.sample(std::vector<float>{5.0f, 1.0f, 9.0f, 0.5f}).token_id, 2);
}

// pick() is sample() without the log-probs: the same token and the same draw, under every
// knob, penalty, suppression and degenerate row, so a copy of a sampler predicts its next draws.
TEST(Sampler, PickChoosesWhatSampleWouldAndConsumesTheSameDraw) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Xoshiro256 data_rng(11);
  for (int variant = 0; variant < 6; ++variant) {
    SamplingParams params = sampling(variant == 0 ? 0.0f : 0.4f * static_cast<float>(variant), 100 + variant);
    if (variant == 2) params.top_k = 5;
    if (variant == 3) params.top_p = 0.6f;
    if (variant == 4) params.min_p = 0.05f;
    if (variant == 5) {
      params.repetition_penalty = 1.3f;
      params.presence_penalty = 0.5f;
      params.frequency_penalty = 0.3f;
      params.top_logprobs = 3;
    }
    const std::vector<int32_t> prompt = {1, 2, 3};
    Sampler sampled(params, prompt);
    Sampler picked(params, prompt);
    sampled.suppress_until({4, 5}, 3);
    picked.suppress_until({4, 5}, 3);
    for (int step = 0; step < 60; ++step) {
      std::vector<float> logits = random_logits(data_rng, 48, 6.0);
      if (step % 17 == 5) std::fill(logits.begin(), logits.end(), nan);  // the uniform fallback
      if (step % 13 == 7) logits[9] = nan;
      const int32_t token = sampled.sample(logits).token_id;
      ASSERT_EQ(picked.pick(logits), token) << "variant " << variant << ", step " << step;
      sampled.accept(token);
      picked.accept(token);
    }
  }
}

// Every call reads the row it is given, whatever the last one's length (the sampler keeps
// scratch rows across calls): a fresh sampler's first token, and rows that grow and shrink.
TEST(Sampler, EachCallReadsItsOwnRowWhateverItsLength) {
  for (float temperature : {0.0f, 1.0f}) {
    Sampler sampler(sampling(temperature, 5), {});
    for (int vocab : {3, 64, 16, 200, 5}) {
      std::vector<float> logits(vocab, -50.0f);
      logits[vocab - 1] = 50.0f;  // all the mass on the last token
      const SampleResult r = sampler.sample(logits);
      EXPECT_EQ(r.token_id, vocab - 1) << "T " << temperature << ", vocab " << vocab;
      EXPECT_NEAR(r.logprob, 0.0f, 1e-6f);
      EXPECT_EQ(sampler.pick(logits), vocab - 1);
    }
  }
}

TEST(Sampler, InfiniteLogitsShareAllTheMass) {
  const std::vector<float> logits = {1.0f, kInf, 5.0f, kInf};
  Sampler sampler(sampling(1.0f, 17), {});
  const std::vector<int> counts = histogram(sampler, logits, 4000);
  EXPECT_LT(chi_square(counts, {0, 0.5, 0, 0.5}), 15.0);
  EXPECT_FLOAT_EQ(sampler.sample(logits).logprob, -std::log(2.0f));
}

// The documented pipeline written plainly: full sort, no lazy head, no overrides.
int32_t reference_sample(const SamplingParams& p, std::vector<float> z,
                         const std::vector<int32_t>& generated, uint64_t key) {
  for (size_t id = 0; id < z.size(); ++id) {
    const auto count = std::count(generated.begin(), generated.end(), static_cast<int32_t>(id));
    if (count == 0) continue;
    z[id] = z[id] > 0 ? z[id] / p.repetition_penalty : z[id] * p.repetition_penalty;
    z[id] -= p.presence_penalty + p.frequency_penalty * static_cast<float>(count);
  }
  const float max = *std::max_element(z.begin(), z.end());
  std::vector<std::pair<float, int32_t>> c;  // (-p, id): ascending = p descending, id ascending
  for (size_t id = 0; id < z.size(); ++id) {
    const float prob = std::exp((z[id] - max) / p.temperature);
    if (prob > 0) c.push_back({-prob, static_cast<int32_t>(id)});
  }
  std::sort(c.begin(), c.end());
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < c.size()) c.resize(p.top_k);
  double total = 0;
  for (const auto& [neg_p, id] : c) total -= neg_p;
  size_t kept = 0;
  double mass = 0;
  while (kept < c.size() && (p.top_p == 1.0f || mass < p.top_p * total)) {
    if (-c[kept].first < p.min_p) break;
    mass -= c[kept].first;
    ++kept;
  }
  // The race: -log(U_x) / p_x, U_x from SplitMix64 at key + x * golden; least wins.
  double best = 1e300;
  int32_t winner = -1;
  for (size_t i = 0; i < kept; ++i) {
    const auto id = static_cast<uint64_t>(c[i].second);
    uint64_t z = key + (id + 1) * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    const double u = (static_cast<double>(z >> 11) + 0.5) / 9007199254740992.0;
    const double t = -std::log(u) / static_cast<double>(-c[i].first);
    if (t < best) best = t, winner = c[i].second;  // ascending ids among equal p: ties to the lower
  }
  return winner;
}

TEST(Sampler, MatchesPlainReferenceOnFlatAndPeakedLogits) {
  Xoshiro256 data_rng(2024);
  for (int trial = 0; trial < 12; ++trial) {
    SamplingParams p = sampling(trial % 3 == 0 ? 0.3f : 1.3f, 100 + trial);
    p.top_k = trial % 4 == 1 ? 300 : 0;
    p.top_p = trial % 2 == 0 ? 0.97f : 1.0f;
    p.min_p = trial % 5 == 2 ? 0.05f : 0.0f;
    p.repetition_penalty = 1.3f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.2f;
    Sampler sampler(p, {});
    Xoshiro256 draws(p.seed);
    std::vector<int32_t> generated;
    for (int step = 0; step < 20; ++step) {
      // Flat logits make the walk reach deep into the vocabulary.
      const std::vector<float> logits = random_logits(data_rng, 5000, step % 2 ? 0.5 : 12.0);
      const int32_t expected = reference_sample(p, logits, generated, draws.next());
      const int32_t token = sampler.sample(logits).token_id;
      ASSERT_EQ(token, expected) << "trial " << trial << " step " << step;
      sampler.accept(token);
      generated.push_back(token);
    }
  }
}

TEST(SamplingParams, ValidateNamesFieldRangeAndValue) {
  EXPECT_TRUE(SamplingParams{}.validate().is_ok());
  auto message = [](auto mutate) {
    SamplingParams p;
    mutate(p);
    return p.validate().message();
  };
  EXPECT_EQ(message([](SamplingParams& p) { p.temperature = -1; }),
            "temperature must be in [0, 2], got -1");
  EXPECT_EQ(message([](SamplingParams& p) { p.temperature = std::nanf(""); }),
            "temperature must be in [0, 2], got nan");
  EXPECT_EQ(message([](SamplingParams& p) { p.top_k = -1; }),
            "top_k must be >= 0 (0 disables it), got -1");
  EXPECT_EQ(message([](SamplingParams& p) { p.top_p = 0; }), "top_p must be in (0, 1], got 0");
  EXPECT_EQ(message([](SamplingParams& p) { p.min_p = 1.5f; }),
            "min_p must be in [0, 1], got 1.5");
  EXPECT_EQ(message([](SamplingParams& p) { p.repetition_penalty = 0; }),
            "repetition_penalty must be a finite number > 0 (1 disables it), got 0");
  EXPECT_EQ(message([](SamplingParams& p) { p.presence_penalty = 2.5f; }),
            "presence_penalty must be in [-2, 2], got 2.5");
  EXPECT_EQ(message([](SamplingParams& p) { p.frequency_penalty = -3; }),
            "frequency_penalty must be in [-2, 2], got -3");
  EXPECT_EQ(message([](SamplingParams& p) { p.top_logprobs = 21; }),
            "top_logprobs must be in [0, 20], got 21");
}

}  // namespace
}  // namespace sluice
