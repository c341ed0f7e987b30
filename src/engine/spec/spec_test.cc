// Speculative decoding: the proposers, and the engine's verification, which must leave every
// output bit-identical to decoding without speculation (runner.cc) and leave no trace of a
// rejected draft.
#include <fstream>
#include <latch>
#include <random>

#include "common/test_paths.h"
#include "model/loader.h"

#include "engine/engine_test_util.h"
#include "engine/spec/draft_length.h"
#include "engine/spec/ngram_proposer.h"
#include "engine/spec/prediction_proposer.h"

namespace sluice {
namespace {

using namespace engine_test;
using spec::NgramProposer;

TEST(NgramProposer, LongestThenMostRecentMatch) {
  //                      0  1  2  3  4  5  6  7  8  9 10
  std::vector<int32_t> t{5, 6, 7, 1, 5, 6, 8, 2, 9, 5, 6};
  // Suffix [5, 6] occurs at 4 (then 8) and at 0 (then 7): the most recent wins.
  EXPECT_EQ(NgramProposer::lookup(t, 1, 2, 3), (std::vector<int32_t>{8, 2, 9}));
  // [9, 5, 6] never occurred before: with min 3 nothing; [x, 5, 6] for longer n neither.
  EXPECT_TRUE(NgramProposer::lookup(t, 3, 4, 3).empty());
  // A longer match beats a more recent shorter one.
  std::vector<int32_t> u{1, 2, 3, 4, 9, 3, 7, 1, 2, 3};
  EXPECT_EQ(NgramProposer::lookup(u, 1, 3, 2), (std::vector<int32_t>{4, 9}));  // [1,2,3] at 0
  EXPECT_EQ(NgramProposer::lookup(u, 1, 1, 2), (std::vector<int32_t>{7, 1}));  // [3] at 5
  // The continuation stops at the end of the context.
  std::vector<int32_t> v{4, 4};
  EXPECT_EQ(NgramProposer::lookup(v, 1, 4, 5), (std::vector<int32_t>{4}));
  EXPECT_TRUE(NgramProposer::lookup(std::vector<int32_t>{4}, 1, 4, 5).empty());
}

TEST(PredictionProposer, FollowsTheOutputAndRealignsAfterAnEdit) {
  spec::PredictionProposer p;
  Request r;
  r.prediction_tokens = {10, 11, 12, 13, 14, 15, 16, 17};
  p.add_sequence(1, r);
  std::vector<int32_t> tokens{100, 101};  // the prompt
  auto propose = [&](int32_t k) {
    std::vector<std::vector<int32_t>> out;
    spec::DraftQuery q{1, tokens, 2, k};
    p.propose(std::span(&q, 1), out);
    return out.at(0);
  };
  EXPECT_EQ(propose(3), (std::vector<int32_t>{10, 11, 12}));
  tokens.insert(tokens.end(), {10, 11});  // two accepted
  EXPECT_EQ(propose(3), (std::vector<int32_t>{12, 13, 14}));
  tokens.push_back(50);                   // an edit: off the prediction
  EXPECT_TRUE(propose(3).empty());
  tokens.push_back(51);
  EXPECT_TRUE(propose(3).empty());
  tokens.push_back(14);                   // back on it, after 12, 13 were dropped
  EXPECT_EQ(propose(2), (std::vector<int32_t>{15, 16}));
  tokens.insert(tokens.end(), {15, 16, 17});
  EXPECT_TRUE(propose(2).empty());        // the prediction is used up
  p.remove_sequence(1);
  EXPECT_TRUE(propose(2).empty());
}

// What usage reports as accepted_prediction_tokens: the output tokens the aligned prediction
// had at the cursor, counted on the output alone.
TEST(PredictionProposer, CountsTheOutputTokensThatCameFromThePrediction) {
  const std::vector<int32_t> prediction = {10, 11, 12, 13, 14, 15, 16, 17};
  auto count = [&](std::vector<int32_t> output) {
    return spec::PredictionProposer::tokens_from_prediction(prediction, output);
  };
  EXPECT_EQ(count({10, 11, 12, 13, 14, 15, 16, 17}), 8);
  EXPECT_EQ(count({10, 11, 50, 51, 14, 15, 16, 17}), 5);  // 10, 11; the edit; 14 realigns: 15, 16, 17
  EXPECT_EQ(count({10, 11, 12, 13, 14, 15, 16, 17, 18}), 8);  // past its end
  EXPECT_EQ(count({50, 51, 52}), 0);
  EXPECT_EQ(count({}), 0);
  EXPECT_EQ(spec::PredictionProposer::tokens_from_prediction({}, std::vector<int32_t>{1, 2}), 0);
}

// Step times as a function of tokens, measured many times.
spec::DraftLength trained(double fixed_ms, double per_token_ms, double acceptance) {
  spec::DraftLength d;
  for (int rep = 0; rep < 5; ++rep) {
    for (int32_t n = 1; n <= 256; n *= 2) d.observe_step(n, n, (fixed_ms + per_token_ms * n) / 1e3);
    d.observe_step(300, 1, 1.0);  // a prompt chunk: not a decode step, not counted
  }
  // Sequences 1..3 of "p": 100 steps of 4 drafts each, each accepted with that probability
  // while the ones before it were.
  std::mt19937 rng(1);
  for (SeqId s = 1; s <= 3; ++s) {
    for (int i = 0; i < 100; ++i) {
      int32_t accepted = 0;
      while (accepted < 4 && rng() < acceptance * 4294967296.0) ++accepted;
      d.observe_verify(s, "p", 4, accepted);
    }
  }
  return d;
}

TEST(DraftLength, DraftsWhereStepsAreMemoryBoundNoneWhereComputeBound) {
  const std::vector<spec::DraftLength::Candidate> three{{1, "p", 8}, {2, "p", 8}, {3, "p", 8}};
  // Nothing measured: no drafts, so that the step without them is measured.
  EXPECT_EQ(spec::DraftLength().choose(4, three), (std::vector<int32_t>{0, 0, 0}));
  // A step costs about the same whatever its size (memory-bound decode), drafts accepted 90%:
  // all of them.
  const spec::DraftLength flat = trained(20, 0.01, 0.9);
  EXPECT_NEAR(flat.acceptance(1, "p"), 0.9, 0.1);
  EXPECT_NEAR(trained(20, 0.01, 0.3).acceptance(2, "p"), 0.3, 0.15);
  EXPECT_EQ(flat.choose(4, three), (std::vector<int32_t>{8, 8, 8}));
  // Compute-bound (time in proportion to tokens): a draft never beats an ordinary decode token.
  const spec::DraftLength compute = trained(0, 1, 0.9);
  EXPECT_EQ(compute.choose(4, three), (std::vector<int32_t>{0, 0, 0}));
  // In between, with rare acceptance: fewer drafts than with frequent acceptance.
  const spec::DraftLength rare = trained(20, 1, 0.3), often = trained(20, 1, 0.9);
  const auto k_rare = rare.choose(4, three), k_often = often.choose(4, three);
  EXPECT_LT(k_rare[0], k_often[0]);
  EXPECT_GT(k_often[0], 0);
  // A sequence never seen takes its proposer's figure.
  EXPECT_NEAR(often.acceptance(99, "p"), often.acceptance(1, "p"), 0.1);
  // Interpolation between measured sizes, flat beyond them.
  EXPECT_NEAR(flat.step_seconds(3), 0.02003, 0.00001);
  EXPECT_NEAR(compute.step_seconds(48), 0.048, 0.00001);
  EXPECT_NEAR(compute.step_seconds(500), 0.256, 0.00001);   // flat up to twice the largest (256)...
  EXPECT_NEAR(compute.step_seconds(1024), 0.512, 0.00001);  // ...then in proportion
  // A step size not measured for kFreshSteps decode steps: no drafts, once, to measure it.
  spec::DraftLength stale = trained(20, 0.01, 0.9);
  for (int i = 0; i < 40; ++i) stale.observe_step(16, 16, 0.02);
  EXPECT_EQ(stale.choose(4, three), (std::vector<int32_t>{0, 0, 0}));
  stale.observe_step(4, 4, 0.02);
  EXPECT_EQ(stale.choose(4, three), (std::vector<int32_t>{8, 8, 8}));
}

// What happened overrules what was estimated: where decode steps with drafts have emitted
// fewer tokens per second than those without, drafts are vetoed but for exploration steps,
// ever rarer while the veto holds; where they did better, or too little is known, allowed.
TEST(DraftLength, OutcomesVetoDraftsThatDidWorseThanNone) {
  spec::DraftLength d = trained(20, 0.01, 0.9);
  const std::vector<spec::DraftLength::Candidate> three{{1, "p", 8}, {2, "p", 8}, {3, "p", 8}};
  EXPECT_EQ(d.choose(4, three), (std::vector<int32_t>{8, 8, 8}));  // the estimates say: draft
  EXPECT_TRUE(d.allow_drafts(4));                                     // nothing observed yet
  for (int i = 0; i < 3; ++i) {
    d.observe_outcome(4, 24, 6, 0.05);  // with drafts: 120 tokens/s
    d.observe_outcome(4, 0, 4, 0.01);   // without: 400 tokens/s
  }
  auto allowed_in = [&](int steps) {
    int n = 0;
    for (int i = 0; i < steps; ++i) n += d.allow_drafts(4);
    return n;
  };
  EXPECT_EQ(allowed_in(15), 0);
  EXPECT_TRUE(d.allow_drafts(4));   // the 16th: an exploration step
  EXPECT_EQ(allowed_in(31), 0);     // then every 32nd, 64th, ... up to every 128th
  EXPECT_TRUE(d.allow_drafts(4));
  EXPECT_EQ(allowed_in(63 + 128), 1);
  // Another batch size has its own figures (none yet): allowed.
  EXPECT_TRUE(d.allow_drafts(16));
  // Drafts that turn out better lift the veto at once.
  for (int i = 0; i < 10; ++i) d.observe_outcome(4, 24, 30, 0.05);  // 600 tokens/s
  EXPECT_EQ(allowed_in(10), 10);
}

Request with_prediction(Request r, std::vector<int32_t> prediction) {
  r.prediction_tokens = std::move(prediction);
  return r;
}

// Changes a fraction of the tokens (deterministically), as an edited file would.
std::vector<int32_t> perturb(std::vector<int32_t> t, double fraction, uint32_t seed) {
  std::mt19937 rng(seed);
  for (int32_t& x : t) {
    if (std::uniform_real_distribution<double>(0, 1)(rng) < fraction) x = static_cast<int32_t>(rng() % 500) + 3;
  }
  return t;
}


void expect_identical_with_speculation(bool sampled) {
  // Fixed draft lengths where the counts are checked; adaptive ones elsewhere.
  Fixture off(EngineConfig{.coalesce = false, .spec = {.adaptive = false}});
  Fixture ngram(
      EngineConfig{.coalesce = false, .spec = {.method = "ngram", .num_tokens = 5, .ngram_min = 1, .adaptive = false}});
  // Adaptive lengths depend on measured times: only the outputs are compared.
  Fixture adaptive(EngineConfig{.coalesce = false, .spec = {.method = "ngram", .num_tokens = 5, .ngram_min = 1}});
  for (const Request& r : test_requests(off, sampled)) {
    const StreamOutput base = off.run(r);
    ASSERT_EQ(base.tokens.size(), 40u);
    expect_same_output(base, ngram.run(r), "ngram");
    expect_same_output(base, adaptive.run(r), "ngram, adaptive");
    expect_same_output(base, adaptive.run(with_prediction(r, perturb(token_ids(base), 0.2, 3))), "prediction, adaptive");
    // Predictions: the output itself, and with 10% and 30% of its tokens changed.
    const std::vector<int32_t> own = token_ids(base);
    for (double changed : {0.0, 0.1, 0.3}) {
      const StreamOutput o = off.run(with_prediction(r, perturb(own, changed, 7)));
      expect_same_output(base, o, fmt::format("prediction with {} changed", changed));
      if (changed == 0.0) {
        // After the prompt's step, 39 tokens at up to 4 drafts + the target's own token a step:
        // 8 steps, and every draft accepted: 39 - 8.
        EXPECT_EQ(o.metrics.num_accepted_tokens, 31);
        EXPECT_EQ(o.metrics.num_draft_tokens, 31);
      }
    }
    // A request can turn speculation off: the same output, no drafts.
    Request no = with_prediction(r, own);
    no.speculative = false;
    const StreamOutput o = ngram.run(no);
    expect_same_output(base, o, "speculative: false");
    EXPECT_EQ(o.metrics.num_draft_tokens, 0);
  }
  const EngineMetrics m = ngram.engine->wait_until_idle();
  ASSERT_TRUE(m.spec.contains("ngram"));
  const EngineMetrics::SpecStats& s = m.spec.at("ngram");
  EXPECT_GT(s.num_draft_tokens, 0);  // random weights rarely repeat: mostly rejections here
  EXPECT_LE(s.num_accepted_tokens, s.num_draft_tokens);
  int64_t by_position = 0;
  for (size_t i = 0; i < s.accepted_per_position.size(); ++i) {
    by_position += s.accepted_per_position[i];
    if (i > 0) {
      EXPECT_LE(s.accepted_per_position[i], s.accepted_per_position[i - 1]);
    }
  }
  EXPECT_EQ(by_position, s.num_accepted_tokens);
  const EngineMetrics mo = off.engine->wait_until_idle();
  EXPECT_GT(mo.spec.at("prediction").num_accepted_tokens, 0);
  EXPECT_FALSE(mo.spec.contains("ngram"));
}

TEST(Speculation, GreedyOutputIsBitIdenticalForEveryProposer) { expect_identical_with_speculation(false); }

TEST(Speculation, SeededSampledOutputIsBitIdenticalForEveryProposer) { expect_identical_with_speculation(true); }

// A real model repeats its context: prompt lookup's drafts are accepted, output unchanged.
TEST(Speculation, PromptLookupOnStories260K) {
  const std::string path = testing::shared_dir() + "/models/stories260K.gguf";
  if (!std::ifstream(path)) GTEST_SKIP() << "no " << path << " (the shared models folder is absent)";
  auto m = load_model(path);
  ASSERT_TRUE(m) << m.error().message();
  ThreadPool pool(2);
  auto off = Engine::create(*m->model, *m->tokenizer, pool, EngineConfig{.coalesce = false});
  auto on = Engine::create(*m->model, *m->tokenizer, pool,
                           EngineConfig{.coalesce = false, .spec = {.method = "ngram", .num_tokens = 4, .adaptive = false}});
  ASSERT_TRUE(off && on);
  Request r;
  r.prompt_tokens = *m->tokenizer->encode("Once upon a time, there was a little girl named Lily. Lily liked to play");
  r.max_tokens = 100;
  r.logprobs = true;
  auto a = (*off)->submit(r);  // one engine at a time: they share the pool
  ASSERT_TRUE(a);
  const StreamOutput want = a->wait();
  auto b = (*on)->submit(r);
  ASSERT_TRUE(b);
  expect_same_output(want, b->wait(), "stories260K, prompt lookup");
  const EngineMetrics::SpecStats s = (*on)->wait_until_idle().spec.at("ngram");
  EXPECT_GT(s.num_accepted_tokens, 0);
  EXPECT_EQ((*on)->wait_until_idle().kv_blocks_used, 0);
}

TEST(Speculation, AnExactPredictionNeedsFewerSteps) {
  Fixture f(EngineConfig{.coalesce = false, .spec = {.num_tokens = 8, .adaptive = false}});
  Request r = f.request("the cat sat on the mat", 48);
  const StreamOutput base = f.run(r);
  const int64_t steps_before = f.engine->wait_until_idle().num_steps;
  const StreamOutput o = f.run(with_prediction(r, token_ids(base)));
  const int64_t steps = f.engine->wait_until_idle().num_steps - steps_before;
  expect_same_output(base, o, "exact prediction");
  // One prefill step, then 47 tokens at up to 9 a step: ceil(47 / 9) = 6 steps.
  EXPECT_EQ(steps, 1 + 6);
}

// Many requests at once, under a small token budget (chunked prompts, drafts squeezed by the
// decodes behind them) and a pool small enough to preempt: each output as if it ran alone.
TEST(Speculation, ConcurrentRequestsUnderPressureAreBitIdenticalAndLeakNothing) {
  Fixture alone(EngineConfig{.coalesce = false});
  EngineConfig tight{.max_num_seqs = 6, .max_batch_tokens = 12, .coalesce = false,
                     .spec = {.method = "ngram", .num_tokens = 4, .ngram_min = 1, .adaptive = false}};
  tight.kv_cache_bytes = 10 * alone.block_bytes(tight);  // 10 blocks of 16 tokens for 6 running at once
  std::latch release(1);
  hold_first_step(tight, release);  // every request queued before the first step: pressure for sure
  Fixture f(tight);
  std::vector<Request> reqs;
  std::vector<StreamOutput> want;
  for (int i = 0; i < 12; ++i) {
    Request r = alone.request(fmt::format("request {} says {} {} {}", i, i % 3, i % 3, i % 3), 20 + i);
    r.logprobs = true;
    if (i % 2 == 1) {
      r.sampling.temperature = 0.7f;
      r.seed = 99 + i;
    }
    const StreamOutput base = alone.run(r);
    if (i % 3 == 0) r.prediction_tokens = perturb(token_ids(base), 0.2, i);
    reqs.push_back(r);
    want.push_back(base);
  }
  std::vector<RequestHandle> handles;
  for (const Request& r : reqs) handles.push_back(std::move(*f.engine->submit(r)));
  release.count_down();
  for (size_t i = 0; i < reqs.size(); ++i) expect_same_output(want[i], handles[i].wait(), fmt::format("request {}", i));
  const EngineMetrics m = f.engine->wait_until_idle();
  EXPECT_GT(m.num_preemptions, 0);
  EXPECT_GT(m.spec.at("ngram").num_accepted_tokens + m.spec.at("prediction").num_accepted_tokens, 0);
}

// Stops inside a run of accepted drafts: the output ends where it would have, with the same
// reason, and the tokens accepted after the stop are not emitted.
TEST(Speculation, StopsAndLimitsAreCheckedOnAcceptedTokens) {
  Fixture off(EngineConfig{.coalesce = false});
  Fixture f(EngineConfig{.coalesce = false, .spec = {.num_tokens = 8, .adaptive = false}});
  Request r = off.request("the cat sat on the mat", 30);
  const StreamOutput full = off.run(r);
  const std::vector<int32_t> own = token_ids(full);
  // A stop string: the text of output tokens 10..11.
  Request stop = r;
  stop.stop_strings = {off.m.tokenizer->decode(std::vector<int32_t>(own.begin() + 10, own.begin() + 12))};
  const StreamOutput a = off.run(stop), b = f.run(with_prediction(stop, own));
  expect_same_output(a, b, "stop string");
  EXPECT_EQ(a.finish_reason, FinishReason::kStop);
  // Drafts accepted after the stop are not the request's: at most every output but the first.
  EXPECT_LE(b.metrics.num_accepted_tokens, b.metrics.num_output_tokens - 1);
  EXPECT_GT(b.metrics.num_accepted_tokens, 0);
  EXPECT_EQ(a.stop_matched, b.stop_matched);
  // A stop token id inside the prediction.
  Request stop_id = r;
  stop_id.stop_token_ids = {own[7]};
  expect_same_output(off.run(stop_id), f.run(with_prediction(stop_id, own)), "stop token");
  // max_tokens smaller than the prediction: drafts never run past it.
  Request shorter = r;
  shorter.max_tokens = 5;
  const StreamOutput c = f.run(with_prediction(shorter, own));
  expect_same_output(off.run(shorter), c, "max_tokens");
  EXPECT_EQ(c.metrics.num_draft_tokens, 3);  // 4 tokens after the prompt's: 3 drafts + 1
}

TEST(Speculation, CancellingASpeculatingRequestFreesItsBlocks) {
  Fixture f(EngineConfig{.coalesce = false, .spec = {.method = "ngram", .ngram_min = 1}});
  Request r = f.request("hello hello hello hello", 200);
  auto h = f.engine->submit(r);
  ASSERT_TRUE(h);
  StreamOutput first = h->next();
  h->cancel();
  StreamOutput rest = h->wait();
  EXPECT_TRUE(rest.finished);
  EXPECT_EQ(f.engine->wait_until_idle().kv_blocks_used, 0);
}

TEST(Speculation, BadSettingsAndPredictionsAreRefused) {
  const LoadedModel m = tiny_model();
  ThreadPool pool(1);
  auto refused = [&](SpecConfig sc, std::string_view needle) {
    auto e = Engine::create(*m.model, *m.tokenizer, pool, EngineConfig{.spec = sc});
    ASSERT_FALSE(e);
    EXPECT_NE(e.error().message().find(needle), std::string::npos) << e.error().message();
  };
  refused({.method = "medusa"}, "unknown speculative method 'medusa'");
  refused({.num_tokens = 0}, "spec-tokens must be in [1, 64]");
  refused({.ngram_min = 3, .ngram_max = 2}, "spec-ngram-min/max");
  Fixture f;
  Request r = f.request("a", 4);
  r.prediction_tokens = {1, 9999};
  auto h = f.engine->submit(r);
  ASSERT_FALSE(h);
  EXPECT_NE(h.error().message().find("prediction token id 9999 is outside the vocabulary"), std::string::npos);
}

}  // namespace
}  // namespace sluice
