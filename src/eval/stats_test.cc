// The statistics against values worked by hand and against their stated coverage.
#include <cmath>
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "eval/compare.h"
#include "eval/report.h"
#include "eval/stats.h"

namespace sluice::eval {
namespace {

TEST(Stats, McNemarExactOnKnownTables) {
  // b = 1, c = 7: n = 8, P(X <= 1) = (1 + 8) / 256, two-sided 18/256 = 0.0703125
  // (the exact binomial test of 1 in 8 at p = 1/2).
  EXPECT_DOUBLE_EQ(mcnemar_exact_p(1, 7), 18.0 / 256.0);
  EXPECT_DOUBLE_EQ(mcnemar_exact_p(7, 1), 18.0 / 256.0);
  // b = 0, c = 6: 2 / 64 = 0.03125; b = 0, c = 5: 2 / 32 = 0.0625.
  EXPECT_DOUBLE_EQ(mcnemar_exact_p(0, 6), 2.0 / 64.0);
  EXPECT_DOUBLE_EQ(mcnemar_exact_p(0, 5), 2.0 / 32.0);
  EXPECT_DOUBLE_EQ(mcnemar_exact_p(4, 4), 1.0);
  EXPECT_DOUBLE_EQ(mcnemar_exact_p(0, 0), 1.0);
  // b = 2, c = 12: 2 * (1 + 14 + 91) / 16384 = 0.012939453125.
  EXPECT_NEAR(mcnemar_exact_p(2, 12), 212.0 / 16384.0, 1e-12);
  EXPECT_EQ(mcnemar_min_discordant(0.05), 6);
}

TEST(Stats, HolmStepDown) {
  const std::vector<double> p = {0.01, 0.04, 0.03, 0.005};
  const std::vector<double> adj = holm(p);
  // Sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1, made monotone: 0.02, 0.03, 0.06, 0.06.
  EXPECT_DOUBLE_EQ(adj[3], 0.02);
  EXPECT_DOUBLE_EQ(adj[0], 0.03);
  EXPECT_DOUBLE_EQ(adj[2], 0.06);
  EXPECT_DOUBLE_EQ(adj[1], 0.06);
}

TEST(Stats, PassAtKAndPassHatK) {
  EXPECT_DOUBLE_EQ(pass_at_k(10, 0, 3), 0.0);
  EXPECT_NEAR(pass_at_k(10, 1, 3), 0.3, 1e-12);       // 1 - C(9,3)/C(10,3) = 1 - 84/120
  EXPECT_NEAR(pass_hat_k(10, 9, 3), 84.0 / 120.0, 1e-12);
  EXPECT_DOUBLE_EQ(pass_hat_k(10, 2, 3), 0.0);
  EXPECT_DOUBLE_EQ(pass_at_k(5, 3, 3), 1.0);
}

TEST(Stats, NormalQuantile) {
  EXPECT_NEAR(normal_quantile(0.975), 1.959964, 1e-6);
  EXPECT_NEAR(normal_quantile(0.8), 0.841621, 1e-6);
  EXPECT_NEAR(normal_quantile(0.001), -3.090232, 1e-6);
}

// Over many seeded trials of 50 paired differences with a known mean, the 95% interval covers
// the mean about 95% of the time (percentile intervals run a little short at this size).
TEST(Stats, BootstrapIntervalCoversAKnownDifferenceAtItsRate) {
  std::mt19937_64 gen(7);
  std::normal_distribution<double> noise(0.0, 1.0);
  const double truth = 0.3;
  const int trials = 400;
  int covered = 0;
  for (int t = 0; t < trials; ++t) {
    std::vector<double> d(50);
    for (double& x : d) x = truth + noise(gen);
    const BootstrapResult r = paired_bootstrap(d, 2000, 0.95, 1000 + t);
    EXPECT_LE(r.lo, r.hi);
    covered += r.lo <= truth && truth <= r.hi;
  }
  const double rate = static_cast<double>(covered) / trials;
  EXPECT_GT(rate, 0.91) << rate;
  EXPECT_LT(rate, 0.98) << rate;
  // Seeded: the same input and seed give the same interval.
  std::vector<double> d = {0.1, -0.2, 0.4, 0.0, 0.3};
  const BootstrapResult a = paired_bootstrap(d, 1000, 0.95, 9), b = paired_bootstrap(d, 1000, 0.95, 9);
  EXPECT_EQ(a.lo, b.lo);
  EXPECT_EQ(a.hi, b.hi);
}

ResultRow row(const std::string& key, bool pass, double score, const std::string& output = "") {
  ResultRow r;
  r.item_key = key;
  r.test = key;
  r.pass = pass;
  r.score = score;
  r.output = output.empty() ? (pass ? "good" : "bad") : output;
  r.grades = {{"assertions", Json::array()}, {"pass_fraction", 1.0}};
  return r;
}

TEST(Compare, AWorseCandidateRegressesWithTheRightItems) {
  std::vector<ResultRow> base, cand;
  for (int i = 0; i < 40; ++i) {
    const std::string k = fmt::format("item{}", i);
    base.push_back(row(k, true, 1));
    cand.push_back(row(k, i >= 10, i >= 10 ? 1 : 0));  // items 0..9 fail now
  }
  const Comparison c = compare_runs(1, base, 2, cand, {});
  EXPECT_EQ(c.verdict, "regressed");
  ASSERT_FALSE(c.metrics.empty());
  EXPECT_EQ(c.metrics[0].name, "pass rate");
  EXPECT_EQ(c.metrics[0].pass_to_fail, 10);
  EXPECT_NEAR(c.metrics[0].diff, -0.25, 1e-12);
  EXPECT_EQ(c.metrics[0].verdict, "regressed");
  for (int i = 0; i < 10; ++i) {
    EXPECT_TRUE(c.items[i].base_pass && !c.items[i].cand_pass) << i;  // the regressed items come first
  }
  EXPECT_EQ(c.metrics.size(), 1u);  // scores are all 0/1: no separate score metric
}

TEST(Compare, IdenticalRunsAreNoChangeAndSmallDifferencesInconclusive) {
  std::vector<ResultRow> base, same, one_flip;
  for (int i = 0; i < 20; ++i) {
    const std::string k = fmt::format("k{}", i);
    base.push_back(row(k, i % 4 != 0, i % 4 != 0));
    same.push_back(row(k, i % 4 != 0, i % 4 != 0));
    one_flip.push_back(row(k, i == 1 ? false : i % 4 != 0, i == 1 ? 0 : i % 4 != 0));
  }
  EXPECT_EQ(compare_runs(1, base, 2, same, {}).verdict, "no change");
  const Comparison c = compare_runs(1, base, 3, one_flip, {});
  EXPECT_EQ(c.metrics[0].verdict, "inconclusive");  // 1 flip in 20: 30pp could not even be seen
  EXPECT_NEAR(c.metrics[0].mde, 6.0 / 20.0, 1e-12);
  EXPECT_EQ(mde_text(c.metrics[0]), "30.0%");
  // A suite of 4 items could not see any drop: its MDE (6 flips of 4) is shown as such, not as 150%.
  const std::vector<ResultRow> base4(base.begin(), base.begin() + 4), flip4(one_flip.begin(), one_flip.begin() + 4);
  const Comparison tiny = compare_runs(1, base4, 3, flip4, {});
  EXPECT_NEAR(tiny.metrics[0].mde, 6.0 / 4.0, 1e-12);
  EXPECT_EQ(mde_text(tiny.metrics[0]), ">100%");
  EXPECT_NE(compare_text(tiny).find(" >100%  inconclusive"), std::string::npos) << compare_text(tiny);
  EXPECT_NE(compare_markdown(tiny).find("| >100% | inconclusive |"), std::string::npos) << compare_markdown(tiny);
  // The HTML report says it as the terminal and Markdown do (it said fractions: 0.3000, >1).
  EXPECT_NE(compare_html(tiny, {}).find("<td>&gt;100%</td>"), std::string::npos);
  EXPECT_NE(compare_html(c, {}).find("<td>30.0%</td>"), std::string::npos);
  // A/A: the flipped item is flaky and the difference is the noise floor.
  CompareOptions aa;
  aa.aa = true;
  const Comparison n = compare_runs(1, base, 3, one_flip, aa);
  EXPECT_EQ(n.num_flaky, 1);
  EXPECT_NEAR(n.noise_floor, 0.05, 1e-12);
}

// Many flips both ways with a small net difference: the spread hides a drop of max_drop, so the
// verdict is inconclusive, not "no change" (the one-way bound alone, 6/1000, said it could see it).
TEST(Compare, ManyFlipsBothWaysAreInconclusive) {
  std::vector<ResultRow> base, cand;
  for (int i = 0; i < 1000; ++i) {
    const std::string k = fmt::format("k{}", i);
    // Items 0..59 pass -> fail, 60..117 fail -> pass, the rest the same in both.
    const bool same = i % 2 == 0;
    base.push_back(row(k, i < 60 ? true : i < 118 ? false : same, 0));
    cand.push_back(row(k, i < 60 ? false : i < 118 ? true : same, 0));
  }
  const Comparison c = compare_runs(1, base, 2, cand, {});
  ASSERT_FALSE(c.metrics.empty());
  EXPECT_EQ(c.metrics[0].pass_to_fail, 60);
  EXPECT_EQ(c.metrics[0].fail_to_pass, 58);
  EXPECT_NEAR(c.metrics[0].diff, -0.002, 1e-12);
  EXPECT_GT(c.metrics[0].mde, 0.02);
  EXPECT_EQ(c.metrics[0].verdict, "inconclusive");
  EXPECT_EQ(c.verdict, "inconclusive");
}

// Runs with no item in common (another suite; a baseline that stopped before any answer):
// nothing was compared, which is not "no change".
TEST(Compare, RunsWithNoItemInCommonCompareNothing) {
  std::vector<ResultRow> base = {row("a", true, 1)}, cand = {row("b", true, 1), row("c", false, 0)}, empty;
  const Comparison c = compare_runs(1, base, 2, cand, {});
  EXPECT_EQ(c.verdict, "nothing compared");
  EXPECT_EQ(c.only_base, 1);
  EXPECT_EQ(c.only_cand, 2);
  EXPECT_EQ(compare_runs(1, empty, 2, cand, {}).verdict, "nothing compared");
  // No report shows it as a pass.
  EXPECT_NE(compare_markdown(c, 10).find("### ❌ sluice eval: **nothing compared**"), std::string::npos);
  const std::string junit = compare_junit(c);
  EXPECT_NE(junit.find("errors=\"1\""), std::string::npos) << junit;
  EXPECT_NE(junit.find("nothing compared: no item is in both runs (1 only in the baseline, 2 only in the candidate)"),
            std::string::npos)
      << junit;
}

// Items of one run only are said in every report, beside those compared (a PR comment said
// "no change" for a candidate that had dropped half the suite).
TEST(Compare, ItemsOfOneRunOnlyAreSaidInEveryReport) {
  std::vector<ResultRow> base = {row("a", true, 1), row("b", true, 1)}, cand = {row("a", true, 1)};
  const Comparison c = compare_runs(1, base, 2, cand, {});
  EXPECT_EQ(c.only_base, 1);
  EXPECT_NE(compare_markdown(c, 10).find("Not compared: items only in the baseline 1, only in the candidate 0."),
            std::string::npos);
  EXPECT_NE(compare_html(c, {}).find("<p id=\"not-compared\">Not compared: items only in the baseline 1,"), std::string::npos);
  EXPECT_NE(compare_text(c).find("not compared: items only in the baseline 1, only in the candidate 0"), std::string::npos);
}

// The Markdown report shows names and outputs as written: a pipe never splits a cell, and in
// text a backslash or markup character is escaped (GitHub would eat `\|`'s backslash, or read
// `*x*` as emphasis); in a code span only the pipe is.
TEST(Compare, MarkdownCellsShowTheirTextAsWritten) {
  std::vector<ResultRow> base = {row("a\\|b *x* <i>", true, 1, "x\\|y|`z`")};
  std::vector<ResultRow> cand = {row("a\\|b *x* <i>", false, 0, "\\n")};
  const std::string md = compare_markdown(compare_runs(1, base, 2, cand, {}), 10);
  EXPECT_NE(md.find("| a\\\\\\|b \\*x\\* \\<i\\> | `x\\\\|y\\|'z'` | `\\n` |"), std::string::npos) << md;
}

// An item passes on its samples' share within rounding (0.28 x 25 is 7), and never with a
// sample unanswered: one rule for the run's summary and for compare.
TEST(Compare, ItemsPassOnTheirShareWithinRounding) {
  EXPECT_TRUE(item_passes(7, 25, 0.28, false));
  EXPECT_TRUE(item_passes(55, 100, 0.55, false));
  EXPECT_FALSE(item_passes(6, 25, 0.28, false));
  EXPECT_FALSE(item_passes(1, 2, 0.5, true));
  EXPECT_TRUE(item_passes(1, 2, 0.5, false));
}

TEST(Compare, ScoresUseTheBootstrapAndSamplesFoldByPassFraction) {
  std::vector<ResultRow> base, cand;
  for (int i = 0; i < 30; ++i) {
    const std::string k = fmt::format("s{}", i);
    for (int s = 0; s < 3; ++s) {
      ResultRow b = row(k, true, 0.9);
      b.sample = s;
      base.push_back(b);
      // Two of three samples pass: below the default pass fraction 1, so the item fails.
      ResultRow a = row(k, s != 2, 0.5);
      a.sample = s;
      cand.push_back(a);
    }
  }
  const Comparison c = compare_runs(1, base, 2, cand, {});
  ASSERT_EQ(c.metrics.size(), 2u);
  EXPECT_EQ(c.metrics[1].name, "score");
  EXPECT_EQ(c.metrics[1].test, "bootstrap");
  EXPECT_NEAR(c.metrics[1].diff, -0.4, 1e-12);
  EXPECT_EQ(c.metrics[1].verdict, "regressed");
  EXPECT_EQ(c.num_flaky, 30);  // every candidate item's samples disagree
  EXPECT_EQ(c.metrics[0].pass_to_fail, 30);
}

}  // namespace
}  // namespace sluice::eval
