#include "engine/scheduler.h"

#include <functional>
#include <map>
#include <numeric>
#include <random>

#include <gtest/gtest.h>

namespace sluice {
namespace {

// A fake runner: the next token of a sequence is a hash of its tokens so far, so a sequence's
// output does not depend on when or with whom it ran, nor on preemption (as with a real model).
struct FakeRunner {
  std::map<SeqId, std::vector<int32_t>> kv;  // tokens whose KV "exists", per sequence
  std::function<std::vector<int32_t>(SeqId)> all_tokens;  // prompt + outputs so far

  std::vector<SampledToken> run(const ScheduleOutput& out, int32_t block_size) {
    std::vector<SampledToken> sampled;
    for (SeqId id : out.preempted) kv.erase(id);
    for (const ScheduledSeq& s : out.seqs) {
      auto& seq_kv = kv[s.seq_id];
      if (seq_kv.empty() && s.start > 0) {  // admitted with a cached prefix
        EXPECT_EQ(s.start % block_size, 0);
        const auto all = all_tokens(s.seq_id);
        seq_kv.assign(all.begin(), all.begin() + s.start);
      }
      EXPECT_EQ(static_cast<int32_t>(seq_kv.size()), s.start) << "sequence " << s.seq_id << " skipped positions";
      EXPECT_GE(static_cast<int64_t>(s.block_table.size()) * block_size,
                s.start + static_cast<int64_t>(s.token_ids.size()));
      seq_kv.insert(seq_kv.end(), s.token_ids.begin(), s.token_ids.end());
      if (s.sample) {
        uint32_t h = 2166136261u;
        for (int32_t t : seq_kv) h = (h ^ static_cast<uint32_t>(t)) * 16777619u;
        sampled.push_back({s.seq_id, static_cast<int32_t>(h % 1000)});
      }
    }
    return sampled;
  }
};

struct Workload {
  std::vector<int32_t> prompt;
  int32_t max_output;
  int32_t priority = 0;
  int32_t arrive_step = 0;
};

struct Trace {
  std::map<SeqId, std::vector<int32_t>> outputs;
  std::map<SeqId, int32_t> cached_tokens;
  std::vector<ScheduleOutput> steps;
  int64_t preemptions = 0;
  Scheduler::CacheStats cache_stats;
};

KvCache make_cache(int32_t num_blocks, int32_t block_size, bool prefix_caching) {
  return KvCache({.num_blocks = num_blocks, .block_size = block_size, .prefix_caching = prefix_caching},
                 [] { return 0.0; });
}

// Drives the scheduler to completion the way the engine does; checks the budgets every step.
Trace drive(const SchedulerConfig& config, int32_t num_blocks, const std::vector<Workload>& work,
            bool prefix_caching = false) {
  KvCache cache = make_cache(num_blocks, config.block_size, prefix_caching);
  Scheduler sched(config, cache);
  FakeRunner runner;
  Trace trace;
  runner.all_tokens = [&](SeqId id) {
    std::vector<int32_t> all = work[id].prompt;
    all.insert(all.end(), trace.outputs[id].begin(), trace.outputs[id].end());
    return all;
  };
  size_t next = 0;
  for (int32_t step = 0; step < 100000; ++step) {
    for (; next < work.size() && work[next].arrive_step <= step; ++next) {
      sched.add(next, work[next].prompt, work[next].priority);
    }
    if (next == work.size() && sched.num_running() == 0 && sched.num_waiting() == 0) break;
    ScheduleOutput out = sched.schedule();
    EXPECT_LE(static_cast<int32_t>(out.seqs.size()), config.max_num_seqs);
    EXPECT_LE(out.num_tokens, config.max_batch_tokens);
    EXPECT_LE(sched.num_running(), config.max_num_seqs);
    auto sampled = runner.run(out, config.block_size);
    sched.update(out, sampled);
    for (const SampledToken& t : sampled) {
      trace.outputs[t.seq_id].push_back(t.token_id);
      if (sched.num_output(t.seq_id) == work[t.seq_id].max_output) {
        trace.cached_tokens[t.seq_id] = sched.num_cached_tokens(t.seq_id);
        sched.finish(t.seq_id);
        runner.kv.erase(t.seq_id);
      }
    }
    trace.steps.push_back(std::move(out));
  }
  trace.preemptions = sched.num_preemptions();
  trace.cache_stats = sched.cache_stats();
  EXPECT_EQ(cache.num_held(), 0) << "blocks leaked";
  EXPECT_EQ(cache.num_free() + cache.num_cached(), num_blocks);
  return trace;
}

std::vector<Workload> random_work(int n, uint32_t seed, int max_prompt, int max_output) {
  std::mt19937 rng(seed);
  std::vector<Workload> work;
  for (int i = 0; i < n; ++i) {
    Workload w;
    w.prompt.resize(1 + rng() % max_prompt);
    for (auto& t : w.prompt) t = static_cast<int32_t>(rng() % 1000);
    w.max_output = 1 + static_cast<int32_t>(rng() % max_output);
    w.priority = static_cast<int32_t>(rng() % 3);
    w.arrive_step = static_cast<int32_t>(rng() % 40);
    work.push_back(std::move(w));
  }
  std::stable_sort(work.begin(), work.end(), [](auto& a, auto& b) { return a.arrive_step < b.arrive_step; });
  return work;
}

TEST(Scheduler, NoStepExceedsTheSequenceOrTokenBudget) {
  const SchedulerConfig config{.max_num_seqs = 5, .max_batch_tokens = 24, .block_size = 4};
  auto work = random_work(40, 1, 60, 20);
  Trace t = drive(config, 200, work);
  ASSERT_EQ(t.outputs.size(), work.size());
  for (size_t i = 0; i < work.size(); ++i) EXPECT_EQ(static_cast<int32_t>(t.outputs[i].size()), work[i].max_output);
  // The budgets were actually reached (the test would pass vacuously otherwise).
  size_t max_seqs = 0;
  int32_t max_tokens = 0;
  for (const auto& s : t.steps) {
    max_seqs = std::max(max_seqs, s.seqs.size());
    max_tokens = std::max(max_tokens, s.num_tokens);
  }
  EXPECT_EQ(max_seqs, 5u);
  EXPECT_EQ(max_tokens, 24);
}

TEST(Scheduler, LongPromptIsChunkedWhileDecodesKeepRunning) {
  // Two short requests start decoding; a 100-token prompt arrives at step 3.
  const SchedulerConfig config{.max_num_seqs = 4, .max_batch_tokens = 16, .block_size = 4};
  std::vector<Workload> work = {{{1, 2, 3}, 60, 0, 0}, {{4, 5}, 60, 0, 0}, {std::vector<int32_t>(100, 7), 2, 0, 3}};
  Trace t = drive(config, 100, work);
  // step 0: both prompts; steps 1, 2: two decodes; from step 3 the long prompt takes 14 tokens
  // a step (16 minus one per decode) until its 100 tokens are in: 7 chunks of 14 and one of 2.
  ASSERT_GT(t.steps.size(), 12u);
  for (int step = 3; step <= 10; ++step) {
    const ScheduleOutput& s = t.steps[step];
    ASSERT_EQ(s.seqs.size(), 3u) << "step " << step;
    EXPECT_EQ(s.seqs[0].token_ids.size(), 1u);
    EXPECT_EQ(s.seqs[1].token_ids.size(), 1u);
    EXPECT_EQ(s.seqs[2].seq_id, 2u);
    EXPECT_EQ(s.seqs[2].token_ids.size(), step < 10 ? 14u : 2u) << "step " << step;
    EXPECT_EQ(s.seqs[2].start, (step - 3) * 14);
    EXPECT_EQ(s.seqs[2].sample, step == 10);
  }
}

TEST(Scheduler, PreemptsLowestPriorityLatestArrivalAndLosesNothing) {
  const SchedulerConfig config{.max_num_seqs = 8, .max_batch_tokens = 64, .block_size = 4};
  auto work = random_work(30, 2, 30, 30);
  const Trace roomy = drive(config, 1000, work);
  EXPECT_EQ(roomy.preemptions, 0);
  // 16 blocks of 4 tokens: every sequence fits alone (at most 60 tokens), not many together.
  const Trace tight = drive(config, 16, work);
  EXPECT_GT(tight.preemptions, 10);
  EXPECT_EQ(tight.outputs, roomy.outputs);
  // With the prefix cache, a preempted sequence finds its own blocks again when they survived.
  const Trace cached = drive(config, 16, work, true);
  EXPECT_GT(cached.preemptions, 10);
  EXPECT_EQ(cached.outputs, roomy.outputs);
}

TEST(Scheduler, VictimIsTheLowestPriorityThenLatestArrival) {
  // Pool of 3 blocks of 4. a (priority 0) and b (priority 1) and c (priority 0, later) each
  // hold one block after their 4-token prompts; the next decode of a needs a fourth block.
  const SchedulerConfig config{.max_num_seqs = 8, .max_batch_tokens = 64, .block_size = 4};
  KvCache blocks = make_cache(3, 4, false);
  Scheduler sched(config, blocks);
  sched.add(10, {1, 2, 3, 4}, 0);
  sched.add(11, {1, 2, 3, 4}, 1);
  sched.add(12, {1, 2, 3, 4}, 0);
  ScheduleOutput out = sched.schedule();
  ASSERT_EQ(out.seqs.size(), 3u);
  EXPECT_EQ(out.seqs[0].seq_id, 10u);  // priority 0 by arrival, then priority 1
  EXPECT_EQ(out.seqs[1].seq_id, 12u);
  EXPECT_EQ(out.seqs[2].seq_id, 11u);
  sched.update(out, std::vector<SampledToken>{{10, 5}, {11, 5}, {12, 5}});
  // a's fifth token needs a second block and none is free: b (lowest priority) gives way and a
  // takes its block. c's fifth token then needs one too; the last running sequence is c itself.
  out = sched.schedule();
  EXPECT_EQ(out.preempted, (std::vector<SeqId>{11, 12}));
  ASSERT_EQ(out.seqs.size(), 1u);
  EXPECT_EQ(out.seqs[0].seq_id, 10u);
  EXPECT_EQ(out.seqs[0].block_table.size(), 2u);
  sched.update(out, std::vector<SampledToken>{{10, 6}});
  EXPECT_EQ(sched.num_waiting(), 2);
  EXPECT_EQ(sched.num_preemptions(), 2);
  EXPECT_EQ(blocks.num_free(), 1);
  // c comes back before b (priority), recomputing its 5 tokens in what fits: one block of 4.
  out = sched.schedule();
  EXPECT_TRUE(out.preempted.empty());
  ASSERT_EQ(out.seqs.size(), 2u);
  EXPECT_EQ(out.seqs[0].seq_id, 10u);
  EXPECT_EQ(out.seqs[1].seq_id, 12u);
  EXPECT_EQ(out.seqs[1].start, 0);
  EXPECT_EQ(out.seqs[1].token_ids, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_FALSE(out.seqs[1].sample);
}

TEST(Scheduler, FinishingMidPromptFreesEveryBlock) {
  const SchedulerConfig config{.max_num_seqs = 4, .max_batch_tokens = 8, .block_size = 4};
  KvCache blocks = make_cache(20, 4, false);
  Scheduler sched(config, blocks);
  sched.add(1, std::vector<int32_t>(30, 3), 0);
  sched.add(2, std::vector<int32_t>(30, 3), 0);
  ScheduleOutput out = sched.schedule();
  ASSERT_EQ(out.seqs.size(), 1u);
  EXPECT_EQ(out.seqs[0].token_ids.size(), 8u);
  sched.update(out, {});
  EXPECT_EQ(blocks.num_held(), 2);
  sched.finish(1);  // mid-prompt
  EXPECT_EQ(blocks.num_held(), 0);
  sched.finish(2);  // still waiting
  sched.finish(3);  // unknown: no-op
  EXPECT_EQ(sched.num_running() + sched.num_waiting(), 0);
  EXPECT_EQ(blocks.num_free(), 20);
}

TEST(Scheduler, WaitingSequencesAreAdmittedByPriorityThenArrival) {
  const SchedulerConfig config{.max_num_seqs = 1, .max_batch_tokens = 64, .block_size = 4};
  KvCache blocks = make_cache(20, 4, false);
  Scheduler sched(config, blocks);
  sched.add(1, {1}, 2);
  sched.add(2, {1}, 1);
  sched.add(3, {1}, 1);
  sched.add(4, {1}, 0);
  std::vector<SeqId> order;
  while (sched.num_waiting() + sched.num_running() > 0) {
    ScheduleOutput out = sched.schedule();
    ASSERT_EQ(out.seqs.size(), 1u);
    order.push_back(out.seqs[0].seq_id);
    sched.update(out, std::vector<SampledToken>{{out.seqs[0].seq_id, 9}});
    sched.finish(out.seqs[0].seq_id);
  }
  EXPECT_EQ(order, (std::vector<SeqId>{4, 2, 3, 1}));
}

// 10 requests share a 100-token prefix, each with its own 8-token question; block size 16.
// The 6 full blocks of the prefix (96 tokens) are cached after the first request, so requests
// 1..9 each get 96 cached tokens: 864 of 1080 prompt tokens, 9 of 10 requests.
std::vector<Workload> shared_prefix_work(int32_t arrive_every) {
  std::vector<int32_t> prefix(100);
  std::iota(prefix.begin(), prefix.end(), 1);
  std::vector<Workload> work;
  for (int i = 0; i < 10; ++i) {
    Workload w{prefix, 4, 0, i * arrive_every};
    for (int j = 0; j < 8; ++j) w.prompt.push_back(500 + 10 * i + j);
    work.push_back(std::move(w));
  }
  return work;
}

TEST(SchedulerPrefixCache, SequentialRequestsHitTheSharedPrefixExactly) {
  const SchedulerConfig config{.max_num_seqs = 4, .max_batch_tokens = 256, .block_size = 16};
  Trace t = drive(config, 200, shared_prefix_work(/*arrive_every=*/20), true);
  EXPECT_EQ(t.cached_tokens[0], 0);
  for (SeqId i = 1; i < 10; ++i) EXPECT_EQ(t.cached_tokens[i], 96) << "request " << i;
  EXPECT_EQ(t.cache_stats.query_tokens, 1080);
  EXPECT_EQ(t.cache_stats.hit_tokens, 864);
  EXPECT_EQ(t.cache_stats.query_requests, 10);
  EXPECT_EQ(t.cache_stats.hit_requests, 9);
  // Same outputs as without the cache.
  EXPECT_EQ(t.outputs, drive(config, 200, shared_prefix_work(20), false).outputs);
}

TEST(SchedulerPrefixCache, ABurstComputesANewPrefixOnce) {
  // All 10 arrive in the same step; the prefix is computed by the first, the others wait for
  // its blocks instead of computing them again.
  const SchedulerConfig config{.max_num_seqs = 16, .max_batch_tokens = 512, .block_size = 16};
  Trace t = drive(config, 200, shared_prefix_work(0), true);
  int64_t computed = 0;
  for (const auto& step : t.steps) computed += step.num_tokens;
  // 108 for the first prompt, 12 (4 partial-block prefix tokens + 8) for each other one, and
  // 3 decode steps of one token for each of the 10.
  EXPECT_EQ(computed, 108 + 9 * 12 + 10 * 3);
  for (SeqId i = 1; i < 10; ++i) EXPECT_EQ(t.cached_tokens[i], 96) << "request " << i;
  EXPECT_EQ(t.outputs, drive(config, 200, shared_prefix_work(0), false).outputs);
}

// A burst follower waits for the prefix block its leader computes; a request of a later
// priority class does not take its slot meanwhile (which then held the follower back until a
// sequence finished).
TEST(SchedulerPrefixCache, ABurstFollowerIsNotPassedByALaterPriorityClass) {
  const SchedulerConfig config{.max_num_seqs = 2, .max_batch_tokens = 512, .block_size = 16};
  std::vector<int32_t> prefix(40);
  std::iota(prefix.begin(), prefix.end(), 1);
  std::vector<int32_t> leader = prefix, follower = prefix, other(20, 7);
  leader.push_back(500);
  follower.push_back(600);
  const Trace t = drive(config, 64, {{leader, 8, 0, 0}, {follower, 8, 0, 0}, {other, 8, 5, 0}}, true);
  auto first_step = [&](SeqId id) {
    for (size_t i = 0; i < t.steps.size(); ++i) {
      for (const ScheduledSeq& s : t.steps[i].seqs) {
        if (s.seq_id == id) return i;
      }
    }
    return t.steps.size();
  };
  EXPECT_EQ(first_step(0), 0u);
  EXPECT_EQ(first_step(1), 1u) << "the follower goes in once its prefix is computed";
  EXPECT_EQ(t.cached_tokens.at(1), 32);
  EXPECT_GT(first_step(2), first_step(1)) << "the priority-5 request waits for the priority-0 ones";
}

TEST(SchedulerPrefixCache, EveryPromptTokenCachedStillComputesTheLastOne) {
  const SchedulerConfig config{.max_num_seqs = 4, .max_batch_tokens = 64, .block_size = 4};
  std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8};
  Trace t = drive(config, 20, {{prompt, 2, 0, 0}, {prompt, 2, 0, 10}}, true);
  // The second request's 8 tokens are all cached; the block holding the last one is not taken,
  // so 4 tokens come from the cache and 4 are computed (the last gives the logits).
  EXPECT_EQ(t.cached_tokens[1], 4);
  EXPECT_EQ(t.outputs[0], t.outputs[1]);
}

// Two 64-token system prompts A and B, 16 requests alternating A, B, A, B, ..., one running at a
// time, and a pool that holds one prompt's blocks but not both. FCFS alternates and every
// request evicts the other prompt; cache-aware admission runs the A requests while A is cached.
std::vector<Workload> alternating_prefix_work() {
  std::vector<Workload> work;
  for (int i = 0; i < 16; ++i) {
    std::vector<int32_t> p(64);
    std::iota(p.begin(), p.end(), i % 2 ? 1000 : 1);
    p.push_back(5000 + i);
    work.push_back({p, 2, 0, 0});
  }
  return work;
}

int64_t computed_tokens(const Trace& t) {
  int64_t n = 0;
  for (const auto& step : t.steps) n += step.num_tokens;
  return n;
}

TEST(SchedulerPrefixCache, CacheAwareAdmissionComputesLess) {
  SchedulerConfig fcfs{.max_num_seqs = 1, .max_batch_tokens = 128, .block_size = 4, .cache_aware_window = 1};
  SchedulerConfig aware = fcfs;
  aware.cache_aware_window = 16;
  const auto work = alternating_prefix_work();
  const Trace a = drive(fcfs, 24, work, true);
  const Trace b = drive(aware, 24, work, true);
  EXPECT_EQ(a.outputs, b.outputs);
  // FCFS: a request's 17 blocks evict 9 of the other prompt's 16 cached blocks (the pool has
  // 24; prefixes shrink from their end), so each later request finds only 7 blocks (28 tokens).
  EXPECT_EQ(a.cache_stats.hit_tokens, 14 * 28);
  // Cache-aware: after the first A and the first B, the others find their 64-token prompt.
  EXPECT_EQ(b.cache_stats.hit_tokens, 14 * 64);
  EXPECT_LT(computed_tokens(b), computed_tokens(a) / 3);
}

TEST(SchedulerPrefixCache, NoRequestIsPassedOverMoreThanMaxBypassTimes) {
  SchedulerConfig config{.max_num_seqs = 1, .max_batch_tokens = 128, .block_size = 4, .cache_aware_window = 64,
                         .max_bypass = 3};
  // One B request first, then 10 A requests: A keeps hitting once cached, but B goes after at
  // most 3 of them.
  std::vector<Workload> work;
  std::vector<int32_t> b(64), a(64);
  std::iota(b.begin(), b.end(), 1000);
  std::iota(a.begin(), a.end(), 1);
  for (int i = 0; i < 11; ++i) {
    std::vector<int32_t> p = i == 0 ? a : i == 1 ? b : a;
    p.push_back(5000 + i);
    work.push_back({p, 2, 0, 0});
  }
  KvCache cache = make_cache(64, 4, true);
  Scheduler sched(config, cache);
  for (size_t i = 0; i < work.size(); ++i) sched.add(i, work[i].prompt, 0);
  std::vector<SeqId> order;
  FakeRunner runner;
  std::map<SeqId, std::vector<int32_t>> outputs;
  runner.all_tokens = [&](SeqId id) {
    auto all = work[id].prompt;
    all.insert(all.end(), outputs[id].begin(), outputs[id].end());
    return all;
  };
  while (sched.num_running() + sched.num_waiting() > 0) {
    ScheduleOutput out = sched.schedule();
    for (const auto& s : out.seqs) {
      if (std::find(order.begin(), order.end(), s.seq_id) == order.end()) order.push_back(s.seq_id);  // admitted
    }
    auto sampled = runner.run(out, 4);
    sched.update(out, sampled);
    for (const auto& t : sampled) {
      outputs[t.seq_id].push_back(t.token_id);
      if (sched.num_output(t.seq_id) == 2) sched.finish(t.seq_id);
    }
  }
  ASSERT_EQ(order.size(), 11u);
  EXPECT_EQ(order[0], 0u);
  const auto b_pos = std::find(order.begin(), order.end(), SeqId{1}) - order.begin();
  EXPECT_EQ(b_pos, 4) << "B (request 1) goes after exactly 3 cache-hitting A requests";
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

TEST(Scheduler, DraftsAreVerifiedAndRejectedOnesRolledBack) {
  const SchedulerConfig config{.max_num_seqs = 4, .max_batch_tokens = 8, .block_size = 4};
  KvCache blocks = make_cache(10, 4, /*prefix_caching=*/true);
  Scheduler sched(config, blocks);
  sched.add(1, {1, 2, 3}, 0);
  ScheduleOutput out = sched.schedule();
  sched.set_draft(1, {7, 7});  // not decoding yet (the prompt runs): ignored
  EXPECT_FALSE(sched.is_decoding(1));
  sched.update(out, std::vector<SampledToken>{{1, 4}});
  EXPECT_TRUE(sched.is_decoding(1));
  // Tokens 1 2 3 4: the last is known, not computed. Five drafts: 4 + 5 positions, 3 blocks.
  sched.set_draft(1, {5, 6, 7, 8, 9});
  out = sched.schedule();
  ASSERT_EQ(out.seqs.size(), 1u);
  EXPECT_EQ(out.seqs[0].token_ids, (std::vector<int32_t>{4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(out.seqs[0].num_draft, 5);
  EXPECT_TRUE(out.seqs[0].sample);
  EXPECT_EQ(out.seqs[0].block_table.size(), 3u);
  // 5 and 6 accepted, then 20 sampled instead of 7: positions 0..5 computed (2 blocks), the third
  // block goes back, and only the first full block is indexed.
  sched.update(out, std::vector<SampledToken>{{1, 5}, {1, 6}, {1, 20}});
  EXPECT_EQ(std::vector<int32_t>(sched.tokens(1).begin(), sched.tokens(1).end()),
            (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 20}));
  EXPECT_EQ(blocks.num_held(), 2);
  EXPECT_EQ(blocks.num_free(), 8);
  EXPECT_EQ(blocks.match(std::vector<int32_t>{1, 2, 3, 4, 5, 6, 20, 0}, 8).size(), 1u);
  // The budget leaves a token for every decode behind: a second sequence decoding behind the
  // first keeps its token; the first's drafts take the rest (8 - 1 - 1 = 6 of 9).
  sched.add(2, {9, 9}, 0);
  out = sched.schedule();
  sched.update(out, std::vector<SampledToken>{{1, 21}, {2, 3}});  // 1 verified nothing: no drafts
  sched.set_draft(1, std::vector<int32_t>(9, 3));
  out = sched.schedule();
  ASSERT_EQ(out.seqs.size(), 2u);
  EXPECT_EQ(out.seqs[0].num_draft, 6);
  EXPECT_EQ(out.seqs[1].token_ids.size(), 1u);
  EXPECT_LE(out.num_tokens, 8);
  // Every draft rejected: 1 keeps positions 0..7 (2 blocks of the 4 it had), 2 its one block.
  sched.update(out, std::vector<SampledToken>{{1, 30}, {2, 4}});
  EXPECT_EQ(blocks.num_held(), 2 + 1);
  sched.finish(1);
  sched.finish(2);
  EXPECT_EQ(blocks.num_held(), 0);
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// Drafts come last: a prompt chunk behind a speculating decode takes the free block first.
TEST(Scheduler, DraftsNeverTakeWhatOthersNeed) {
  const SchedulerConfig config{.max_num_seqs = 4, .max_batch_tokens = 8, .block_size = 4};
  KvCache blocks = make_cache(4, 4, /*prefix_caching=*/false);
  Scheduler sched(config, blocks);
  sched.add(1, {1, 2, 3}, 0);
  sched.add(2, std::vector<int32_t>(10, 5), 1);
  ScheduleOutput out = sched.schedule();  // 1: 3 tokens (1 block); 2: 5 tokens (2 blocks)
  ASSERT_EQ(out.seqs.size(), 2u);
  sched.update(out, std::vector<SampledToken>{{1, 4}});
  EXPECT_EQ(blocks.num_free(), 1);
  sched.set_draft(1, {9, 9, 9, 9});
  out = sched.schedule();
  ASSERT_EQ(out.seqs.size(), 2u);
  EXPECT_TRUE(out.preempted.empty());
  EXPECT_EQ(out.seqs[0].num_draft, 0);  // its drafts would need the block 2's chunk takes
  EXPECT_EQ(out.seqs[1].token_ids.size(), 5u);
  sched.update(out, std::vector<SampledToken>{{1, 6}, {2, 7}});
  // Finishing 2 frees its 3 blocks: the rest of the budget (8 - 1) goes to 1's drafts.
  sched.finish(2);
  sched.set_draft(1, {9, 9, 9, 9, 9, 9});
  out = sched.schedule();
  ASSERT_EQ(out.seqs.size(), 1u);
  EXPECT_EQ(out.seqs[0].num_draft, 6);
  sched.finish(1);
  EXPECT_EQ(blocks.num_free(), 4);
}

}  // namespace
}  // namespace sluice
