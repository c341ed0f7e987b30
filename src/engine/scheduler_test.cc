#include "engine/scheduler.h"

#include <map>
#include <random>

#include <gtest/gtest.h>

namespace sluice {
namespace {

// A fake runner: the next token of a sequence is a hash of its tokens so far, so a sequence's
// output does not depend on when or with whom it ran, nor on preemption (as with a real model).
struct FakeRunner {
  std::map<SeqId, std::vector<int32_t>> kv;  // tokens whose KV "exists", per sequence

  std::vector<SampledToken> run(const ScheduleOutput& out, int32_t block_size) {
    std::vector<SampledToken> sampled;
    for (SeqId id : out.preempted) kv.erase(id);
    for (const ScheduledSeq& s : out.seqs) {
      auto& seq_kv = kv[s.seq_id];
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
  std::vector<ScheduleOutput> steps;
  int64_t preemptions = 0;
};

// Drives the scheduler to completion the way the engine does; checks the budgets every step.
Trace drive(const SchedulerConfig& config, int32_t num_blocks, const std::vector<Workload>& work) {
  BlockPool blocks(num_blocks);
  Scheduler sched(config, blocks);
  FakeRunner runner;
  Trace trace;
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
        sched.finish(t.seq_id);
        runner.kv.erase(t.seq_id);
      }
    }
    trace.steps.push_back(std::move(out));
  }
  trace.preemptions = sched.num_preemptions();
  EXPECT_EQ(blocks.num_free(), num_blocks) << "blocks leaked";
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
}

TEST(Scheduler, VictimIsTheLowestPriorityThenLatestArrival) {
  // Pool of 3 blocks of 4. a (priority 0) and b (priority 1) and c (priority 0, later) each
  // hold one block after their 4-token prompts; the next decode of a needs a fourth block.
  const SchedulerConfig config{.max_num_seqs = 8, .max_batch_tokens = 64, .block_size = 4};
  BlockPool blocks(3);
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
  BlockPool blocks(20);
  Scheduler sched(config, blocks);
  sched.add(1, std::vector<int32_t>(30, 3), 0);
  sched.add(2, std::vector<int32_t>(30, 3), 0);
  ScheduleOutput out = sched.schedule();
  ASSERT_EQ(out.seqs.size(), 1u);
  EXPECT_EQ(out.seqs[0].token_ids.size(), 8u);
  sched.update(out, {});
  EXPECT_EQ(blocks.num_used(), 2);
  sched.finish(1);  // mid-prompt
  EXPECT_EQ(blocks.num_used(), 0);
  sched.finish(2);  // still waiting
  sched.finish(3);  // unknown: no-op
  EXPECT_EQ(sched.num_running() + sched.num_waiting(), 0);
  EXPECT_EQ(blocks.num_free(), 20);
}

TEST(Scheduler, WaitingSequencesAreAdmittedByPriorityThenArrival) {
  const SchedulerConfig config{.max_num_seqs = 1, .max_batch_tokens = 64, .block_size = 4};
  BlockPool blocks(20);
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

}  // namespace
}  // namespace sluice
