// The draft model proposer: a draft's vocabulary checked against the target's, and drafts from
// a second model (a quantized copy, the target's own weights) that leave every output
// bit-identical to decoding without speculation.
#include <cmath>
#include <latch>
#include <map>

#include "tokenizer/test_vocab.h"

#include "engine/engine_test_util.h"
#include "engine/spec/draft_model_proposer.h"

namespace sluice {
namespace {

using namespace engine_test;

TEST(DraftVocabulary, SameTextForEveryIdAndPaddingOnly) {
  auto tok = [](std::vector<std::pair<std::string, float>> pieces) {
    return std::move(*testing::tokenizer_from_writer(testing::tiny_spm_writer(pieces)));
  };
  const auto target = tok({{"ab", -1}, {"cd", -2}});
  EXPECT_TRUE(spec::check_draft_vocabulary(*target, *tok({{"ab", -1}, {"cd", -2}})));
  // Scores may differ (another training run of the same tokenizer does not change the ids).
  EXPECT_TRUE(spec::check_draft_vocabulary(*target, *tok({{"ab", -5}, {"cd", -2}})));
  const Status other = spec::check_draft_vocabulary(*target, *tok({{"ab", -1}, {"ce", -2}}));
  EXPECT_EQ(other.message(), "token 260 differs: 'cd' in the target, 'ce' in the draft");
  EXPECT_TRUE(spec::check_draft_vocabulary(*target, *tok({{"ab", -1}, {"cd", -2}, {"[PAD261]", 0}})));
  const Status more = spec::check_draft_vocabulary(*target, *tok({{"ab", -1}, {"cd", -2}, {"ef", -3}}));
  EXPECT_NE(more.message().find("differ in size (261 in the target, 262 in the draft) by more than padding: token "
                                "261 is 'ef' in the draft only"),
            std::string::npos)
      << more.message();
  const Status kind = spec::check_draft_vocabulary(*target, *testing::tokenizer_from_writer(testing::tiny_bpe_writer({})).value());
  EXPECT_NE(kind.message().find("differ in kind: spm in the target, bpe in the draft"), std::string::npos) << kind.message();
}

// A lower-bit copy of the target's own weights (the draft most users have): the outputs stay
// bit-identical, its drafts are mostly accepted, and every block of both caches is free after.
TEST(DraftModel, QuantizedCopyDraftsAndOutputsAreUnchanged) {
  Fixture off(EngineConfig{.coalesce = false});
  const LoadedModel draft = tiny_model(gguf::TensorType::kQ8_0);
  // Adaptive off and on; and a draft cache of 5 blocks for 4 running sequences of up to 4 blocks
  // each, so sequences take blocks from each other (least recently drafted first) or draft not at all.
  for (const auto& [adaptive, draft_blocks] : {std::pair{false, 0}, std::pair{true, 0}, std::pair{false, 5}}) {
    EngineConfig cfg{.max_num_seqs = 4, .max_batch_tokens = 16, .coalesce = false};
    cfg.spec = {.method = "draft", .num_tokens = 4, .adaptive = adaptive, .draft_model = draft.model.get(),
                .draft_tokenizer = draft.tokenizer.get()};
    cfg.spec.draft_kv_cache_bytes = draft_blocks * off.block_bytes(cfg);
    std::latch release(1);
    hold_first_step(cfg, release);
    Fixture f(cfg);
    std::vector<Request> reqs = test_requests(off, /*sampled=*/false);
    for (Request r : test_requests(off, /*sampled=*/true)) reqs.push_back(r);
    std::vector<StreamOutput> want;
    for (const Request& r : reqs) want.push_back(off.run(r));
    std::vector<RequestHandle> handles;
    for (const Request& r : reqs) handles.push_back(std::move(*f.engine->submit(r)));
    release.count_down();
    int32_t drafted[2] = {}, accepted[2] = {};  // of the greedy requests (the first half), of the sampled ones
    for (size_t i = 0; i < reqs.size(); ++i) {
      const StreamOutput o = handles[i].wait();
      expect_same_output(want[i], o, fmt::format("request {}, adaptive {}", i, adaptive));
      const size_t half = i < reqs.size() / 2 ? 0 : 1;
      drafted[half] += o.metrics.num_draft_tokens, accepted[half] += o.metrics.num_accepted_tokens;
    }
    const EngineMetrics m = f.engine->wait_until_idle();
    EXPECT_EQ(m.draft_kv_blocks_used, 0);
    EXPECT_EQ(m.draft_kv_blocks_total, draft_blocks > 0 ? draft_blocks : m.draft_kv_blocks_total);
    // Q8_0 of the same weights: its greedy drafts nearly always agree with the target's argmax,
    // and its sampled ones, drawn with the target's own draws, mostly agree with the target's.
    // (With adaptive lengths, whether it drafts at all depends on the measured step times.)
    if (!adaptive) {
      EXPECT_GT(m.spec.at("draft_model").num_draft_tokens, 0);
      EXPECT_GT(accepted[0], drafted[0] * 8 / 10) << accepted[0] << " of " << drafted[0];
      EXPECT_GT(accepted[1], drafted[1] * 7 / 10) << accepted[1] << " of " << drafted[1];
    }
  }
}

// The target's own weights as the draft: its logits are the target's to the bit (batch
// invariance), and it drafts with a copy of the target's sampler, so every sampled draft is the
// token the target then samples: all accepted, at any temperature and with every knob.
TEST(DraftModel, ItsOwnWeightsAsTheDraftAreAlwaysAcceptedWhenSampling) {
  Fixture off(EngineConfig{.coalesce = false});
  const LoadedModel draft = tiny_model();
  EngineConfig cfg{.coalesce = false};
  cfg.spec = {.method = "draft", .num_tokens = 3, .adaptive = false, .draft_model = draft.model.get(),
              .draft_tokenizer = draft.tokenizer.get()};
  Fixture f(cfg);
  for (const Request& r : test_requests(off, /*sampled=*/true)) {
    const StreamOutput o = f.run(r);
    expect_same_output(off.run(r), o, "own weights");
    EXPECT_GT(o.metrics.num_draft_tokens, 0);
    EXPECT_EQ(o.metrics.num_accepted_tokens, o.metrics.num_draft_tokens);
  }
}

// Two-sample Pearson chi-square of two histograms of equal totals over the cells both fill
// (cells with fewer than 10 draws together are pooled), and its p-value by the Wilson-Hilferty
// normal approximation of the chi-square distribution.
double chi_square_p_value(const std::map<int32_t, int>& a, const std::map<int32_t, int>& b) {
  std::map<int32_t, std::pair<int, int>> cells;
  for (const auto& [t, n] : a) cells[t].first += n;
  for (const auto& [t, n] : b) cells[t].second += n;
  double stat = 0;
  int dof = -1;
  std::pair<int, int> pooled{0, 0};
  auto add = [&](std::pair<int, int> c) {
    stat += static_cast<double>(c.first - c.second) * (c.first - c.second) / (c.first + c.second);
    ++dof;
  };
  for (const auto& [t, c] : cells) {
    if (c.first + c.second < 10) {
      pooled.first += c.first, pooled.second += c.second;
    } else {
      add(c);
    }
  }
  if (pooled.first + pooled.second > 0) add(pooled);
  if (dof < 1) return 1.0;
  const double k = dof, h = 2.0 / (9.0 * k);
  const double z = (std::cbrt(stat / k) - (1.0 - h)) / std::sqrt(h);
  return 0.5 * std::erfc(z / std::sqrt(2.0));
}

// Speculation leaves the output distribution unchanged: thousands of sampled continuations with
// and without it (different seeds, so this compares distributions, not runs), a chi-square test
// on the token frequencies at each of the first positions. The drafts come from a lower-bit copy
// (rejected now and then) and from predictions. The same test tells a change of temperature
// from 1 to 0.8 apart, so it would see a verifier that skews the distribution that much.
TEST(Speculation, SampledOutputDistributionIsUnchanged) {
  constexpr int kSamples = 2000, kPositions = 5;
  const LoadedModel draft = tiny_model(gguf::TensorType::kQ4_0);
  EngineConfig spec_cfg{.max_num_seqs = 64};
  spec_cfg.spec = {.method = "draft", .num_tokens = 3, .adaptive = false, .draft_model = draft.model.get(),
                   .draft_tokenizer = draft.tokenizer.get()};
  Fixture off(EngineConfig{.max_num_seqs = 64});
  Fixture on(spec_cfg);
  using Histograms = std::vector<std::map<int32_t, int>>;
  auto sample = [&](Fixture& f, float temperature, uint64_t first_seed, bool predicted, int64_t* accepted,
                    int64_t* drafted) {
    Histograms h(kPositions);
    for (int wave = 0; wave < kSamples; wave += 200) {
      std::vector<RequestHandle> handles;
      for (int i = wave; i < std::min(kSamples, wave + 200); ++i) {
        Request r = f.request("once upon a time", kPositions);
        r.sampling.temperature = temperature;
        r.sampling.top_k = 12;
        r.seed = first_seed + static_cast<uint64_t>(i);
        if (predicted && i % 2 == 1) r.prediction_tokens = {40, 41, 42, 43, 44};
        handles.push_back(std::move(*f.engine->submit(std::move(r))));
      }
      for (RequestHandle& handle : handles) {
        const StreamOutput o = handle.wait();
        EXPECT_EQ(o.tokens.size(), static_cast<size_t>(kPositions));
        for (size_t j = 0; j < o.tokens.size() && j < kPositions; ++j) ++h[j][o.tokens[j].token_id];
        if (accepted) *accepted += o.metrics.num_accepted_tokens, *drafted += o.metrics.num_draft_tokens;
      }
    }
    return h;
  };
  int64_t accepted = 0, drafted = 0;
  const Histograms without = sample(off, 1.0f, 1, false, nullptr, nullptr);
  const Histograms with = sample(on, 1.0f, 1'000'001, true, &accepted, &drafted);
  const Histograms cooler = sample(off, 0.8f, 2'000'001, false, nullptr, nullptr);
  // Speculation did happen, with acceptances and rejections.
  EXPECT_GT(accepted, kSamples / 4);
  EXPECT_GT(drafted - accepted, kSamples / 4);
  double least_cooler = 1.0;
  for (int j = 0; j < kPositions; ++j) {
    const double p = chi_square_p_value(without[j], with[j]);
    EXPECT_GT(p, 1e-3) << "position " << j << ": the distribution changed with speculation";
    least_cooler = std::min(least_cooler, chi_square_p_value(without[j], cooler[j]));
  }
  EXPECT_LT(least_cooler, 1e-3) << "the test cannot tell temperature 0.8 from 1";
}

TEST(DraftModel, MismatchedVocabularyOrMissingModelIsRefused) {
  const LoadedModel target = tiny_model();
  ThreadPool pool(1);
  const LoadedModel draft = tiny_model(gguf::TensorType::kF32, "small");  // a vocabulary of 4096
  EngineConfig cfg;
  cfg.spec = {.method = "draft", .draft_model = draft.model.get(), .draft_tokenizer = draft.tokenizer.get()};
  auto e = Engine::create(*target.model, *target.tokenizer, pool, cfg);
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message().find("the draft model cannot draft for this model: "), std::string::npos)
      << e.error().message();
  auto missing = Engine::create(*target.model, *target.tokenizer, pool, EngineConfig{.spec = {.method = "draft"}});
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message().find("--spec draft --draft-model FILE"), std::string::npos);
}

}  // namespace
}  // namespace sluice
