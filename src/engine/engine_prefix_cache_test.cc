// The engine with its prefix cache: outputs identical with it on and off, exact hit
// accounting, shared blocks under preemption and cancellation, pinned prefixes.
#include <random>

#include "engine/engine_test_util.h"

namespace sluice {
namespace {

using namespace engine_test;

std::vector<Request> shared_prefix_requests(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> systems(3);
  for (auto& sys : systems) {
    sys.resize(20 + rng() % 40);
    for (auto& t : sys) t = static_cast<int32_t>(rng() % 512);
  }
  std::vector<Request> reqs;
  for (int i = 0; i < n; ++i) {
    Request r;
    r.prompt_tokens = systems[rng() % systems.size()];
    const int question = static_cast<int>(rng() % 12);
    for (int j = 0; j < question; ++j) r.prompt_tokens.push_back(static_cast<int32_t>(rng() % 512));
    r.max_tokens = 1 + static_cast<int32_t>(rng() % 24);
    r.ignore_eos = true;
    r.logprobs = true;
    if (i % 3 == 0) {
      r.sampling.temperature = 0.7f;
      r.seed = rng();
    }
    reqs.push_back(std::move(r));
  }
  return reqs;
}

TEST(EnginePrefixCache, OutputsAreBitIdenticalWithTheCacheOnAndOff) {
  EngineConfig on{.max_num_seqs = 8, .max_batch_tokens = 32, .block_size = 4, .coalesce = false};
  EngineConfig off = on;
  off.prefix_caching = false;
  auto reqs = shared_prefix_requests(40, 9);
  Fixture cache_off(off), cache_on(on), sequential(on);
  std::vector<StreamOutput> expected;
  for (const Request& r : reqs) expected.push_back(cache_off.run(r));
  auto concurrent = run_concurrently(*cache_on.engine, reqs, 3);
  for (size_t i = 0; i < reqs.size(); ++i) {
    expect_same_output(concurrent[i], expected[i], fmt::format("concurrent {}", i));
    expect_same_output(sequential.run(reqs[i]), expected[i], fmt::format("sequential {}", i));
  }
  EngineMetrics m = cache_on.engine->wait_until_idle();
  EXPECT_GT(m.prefix_cache_hit_tokens, m.prefix_cache_query_tokens / 3) << "the workload should hit the cache";
  EngineMetrics s = sequential.engine->wait_until_idle();
  EXPECT_GT(s.prefix_cache_hit_requests, 30);
  const EngineMetrics o = cache_off.engine->wait_until_idle();
  EXPECT_EQ(o.prefix_cache_hit_tokens, 0);
  EXPECT_EQ(o.prefix_cache_query_tokens, 0) << "with the cache off nothing is looked up";
}

// 10 requests share a 100-token prefix, block size 16: after the first, each finds the 6 full
// blocks of the prefix (96 tokens) in the cache.
TEST(EnginePrefixCache, HitAccountingIsExact) {
  Fixture f(EngineConfig{.block_size = 16});
  std::vector<int32_t> prefix(100);
  std::iota(prefix.begin(), prefix.end(), 1);
  std::vector<int32_t> cached;
  for (int i = 0; i < 10; ++i) {
    Request r = f.request("", 3);
    r.prompt_tokens = prefix;
    for (int j = 0; j < 5; ++j) r.prompt_tokens.push_back(300 + 10 * i + j);
    cached.push_back(f.run(r).metrics.cached_tokens);
  }
  EXPECT_EQ(cached, (std::vector<int32_t>{0, 96, 96, 96, 96, 96, 96, 96, 96, 96}));
  EngineMetrics m = f.engine->wait_until_idle();
  EXPECT_EQ(m.prefix_cache_query_tokens, 1050);
  EXPECT_EQ(m.prefix_cache_hit_tokens, 864);
  EXPECT_EQ(m.prefix_cache_query_requests, 10);
  EXPECT_EQ(m.prefix_cache_hit_requests, 9);
  // Each request's seventh block (4 prefix tokens, its question, 2 computed outputs: 11 of 16)
  // never filled, so only the prefix's 6 blocks stay cached.
  EXPECT_EQ(m.kv_blocks_cached, 6);
}

// Only lookups count toward the hit rate: a prompt to score (computed in full, never looked up)
// adds no query, even when its prefix is cached.
TEST(EnginePrefixCache, ScoredPromptsAreNotLookups) {
  Fixture f(EngineConfig{.block_size = 4});
  std::vector<int32_t> prompt(20);
  std::iota(prompt.begin(), prompt.end(), 1);
  Request plain = f.request("", 2);
  plain.prompt_tokens = prompt;
  f.run(plain);
  Request scored = plain;
  scored.prompt_logprobs = true;
  scored.max_tokens = 0;
  EXPECT_EQ(f.run(scored).metrics.cached_tokens, 0);
  EXPECT_EQ(f.run(plain).metrics.cached_tokens, 16);
  EngineMetrics m = f.engine->wait_until_idle();
  EXPECT_EQ(m.prefix_cache_query_tokens, 40);
  EXPECT_EQ(m.prefix_cache_hit_tokens, 16);
  EXPECT_EQ(m.prefix_cache_query_requests, 2);
  EXPECT_EQ(m.prefix_cache_hit_requests, 1);
}

TEST(EnginePrefixCache, PreemptionAndCancellationWithSharedBlocksLeakNothing) {
  EngineConfig config{.max_num_seqs = 12, .max_batch_tokens = 48, .block_size = 4, .coalesce = false};
  Fixture probe(config);
  config.kv_cache_bytes = 30 * probe.block_bytes(config);  // 120 tokens: preemption is frequent
  std::vector<RequestHandle>* handles = nullptr;
  int steps = 0;
  config.on_step = [&](const ScheduleOutput&) {
    // Cancel every fifth request at step 10 + 3k (mid-prompt or mid-decode, whichever it is in).
    ++steps;
    if (handles && steps >= 10 && (steps - 10) % 3 == 0 && size_t((steps - 10) / 3 * 5) < handles->size()) {
      (*handles)[(steps - 10) / 3 * 5].cancel();
    }
  };
  std::latch submitted(1);
  bool first = true;
  auto on_step = config.on_step;
  config.on_step = [&, on_step](const ScheduleOutput& out) {
    if (std::exchange(first, false)) submitted.wait();
    on_step(out);
  };
  Fixture tight(config);
  EngineConfig alone_config{.max_num_seqs = 1, .max_batch_tokens = 48, .block_size = 4, .prefix_caching = false};
  Fixture alone(alone_config);
  auto reqs = shared_prefix_requests(40, 21);
  std::vector<RequestHandle> hs;
  for (const Request& r : reqs) hs.push_back(std::move(*tight.engine->submit(r)));
  handles = &hs;
  submitted.count_down();
  int cancelled = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    StreamOutput o = hs[i].wait();
    if (o.finish_reason == FinishReason::kCancelled) {
      ++cancelled;
      continue;
    }
    expect_same_output(o, alone.run(reqs[i]), fmt::format("request {}", i));
  }
  EXPECT_GT(cancelled, 0);
  EngineMetrics m = tight.engine->wait_until_idle();
  EXPECT_GT(m.num_preemptions, 5);
  EXPECT_GT(m.prefix_cache_hit_tokens, 0);
  EXPECT_EQ(m.kv_blocks_used, 0);
  EXPECT_EQ(m.kv_blocks_free + m.kv_blocks_cached, 30);
}

// A system prompt pinned by config survives a flood of unrelated requests; under plain LRU the
// same flood evicts it.
TEST(EnginePrefixCache, PinnedPrefixSurvivesPressure) {
  std::vector<int32_t> system(32);
  std::iota(system.begin(), system.end(), 7);
  auto run_flood = [&](const std::string& policy) {
    EngineConfig config{.max_num_seqs = 4, .max_batch_tokens = 64, .block_size = 4, .kv_eviction = policy};
    config.pinned_prefixes = {system};
    Fixture probe(config);
    config.kv_cache_bytes = 24 * probe.block_bytes(config);
    Fixture f(config);
    Request r = f.request("", 2);
    r.prompt_tokens = system;
    r.prompt_tokens.push_back(400);
    f.run(r);
    std::mt19937 rng(5);
    for (int i = 0; i < 20; ++i) {
      Request other = f.request("", 4);
      other.prompt_tokens.resize(40);
      for (auto& t : other.prompt_tokens) t = static_cast<int32_t>(rng() % 512);
      f.run(other);
    }
    r.prompt_tokens.back() = 401;
    return f.run(r).metrics.cached_tokens;
  };
  EXPECT_EQ(run_flood("pinned"), 32);
  EXPECT_EQ(run_flood("lru"), 0);
}

// Blocks a pinned prefix keeps are not room for other sequences: a request on none of the
// prefixes gets the pool less the pinned blocks (refused beyond it, cut short at it), one on a
// prefix the rest as well; a prefix of more than half the pool is reused, not double-counted
// (both once aborted the engine on its empty step), and prefixes filling the pool are refused.
TEST(EnginePrefixCache, PinnedBlocksAreNotRoomForOtherSequences) {
  auto make = [](int32_t prefix_tokens, std::vector<int32_t>& system) {
    system.resize(prefix_tokens);
    std::iota(system.begin(), system.end(), 7);
    EngineConfig config{.max_num_seqs = 4, .max_batch_tokens = 64, .block_size = 4, .kv_eviction = "pinned"};
    config.pinned_prefixes = {system};
    Fixture probe(config);
    config.kv_cache_bytes = 24 * probe.block_bytes(config);  // 96 tokens
    return config;
  };
  auto unrelated = [](Fixture& f, int32_t n, int32_t max_tokens) {
    Request r = f.request("", max_tokens);
    r.prompt_tokens.resize(n);
    std::iota(r.prompt_tokens.begin(), r.prompt_tokens.end(), 300);
    return r;
  };
  {
    std::vector<int32_t> system;
    Fixture f(make(32, system));  // 8 of the 24 blocks pinned: 64 tokens for the rest
    Request on = f.request("", 2);
    on.prompt_tokens = system;
    on.prompt_tokens.push_back(400);
    EXPECT_EQ(f.run(on).tokens.size(), 2u);
    auto refused = f.engine->submit(unrelated(f, 70, 4));
    ASSERT_FALSE(refused);
    EXPECT_NE(refused.error().message().find("holds only 64 tokens beside the pinned prefixes' 8 blocks"),
              std::string::npos)
        << refused.error().message();
    StreamOutput cut = f.run(unrelated(f, 60, 10));
    EXPECT_EQ(cut.tokens.size(), 4u);
    EXPECT_EQ(cut.finish_reason, FinishReason::kLength);
    // On the prefix: its own 8 blocks count, so 90 tokens fit.
    on.prompt_tokens.resize(88, 401);
    on.max_tokens = 4;
    StreamOutput long_on = f.run(on);
    EXPECT_EQ(long_on.tokens.size(), 4u);
    EXPECT_EQ(long_on.metrics.cached_tokens, 32);
  }
  {
    std::vector<int32_t> system;
    Fixture f(make(48, system));  // 12 of 24 blocks
    Request r = f.request("", 2);
    r.prompt_tokens = system;
    r.prompt_tokens.push_back(400);
    f.run(r);
    r.prompt_tokens.back() = 401;
    EXPECT_EQ(f.run(r).metrics.cached_tokens, 48);
    EXPECT_EQ(f.run(unrelated(f, 40, 4)).tokens.size(), 4u);
  }
  std::vector<int32_t> system;
  EngineConfig whole = make(100, system);  // 25 blocks
  LoadedModel m = tiny_model();
  ThreadPool pool(1);
  auto refused = Engine::create(*m.model, *m.tokenizer, pool, whole);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("the pinned prefixes take 25 blocks of 4 tokens, the whole KV cache of 24"),
            std::string::npos)
      << refused.error().message();
}

// n samples of one prompt (as an API request with n > 1 becomes): the prompt's full blocks are
// computed once and shared; each sample computes only the last, partial block.
TEST(EnginePrefixCache, SamplesOfOnePromptShareItsBlocks) {
  std::latch submitted(1);
  EngineConfig config{.block_size = 4};
  hold_first_step(config, submitted);
  Fixture f(config);
  Request r = f.request("", 6);
  r.prompt_tokens.resize(30);
  std::iota(r.prompt_tokens.begin(), r.prompt_tokens.end(), 40);
  r.sampling.temperature = 1.0f;
  std::vector<RequestHandle> samples;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    r.seed = seed;
    samples.push_back(std::move(*f.engine->submit(r)));
  }
  submitted.count_down();
  std::vector<int32_t> cached;
  for (auto& h : samples) cached.push_back(h.wait().metrics.cached_tokens);
  // The first computes the 30 prompt tokens; the others find its 7 full blocks (28 tokens).
  std::sort(cached.begin(), cached.end());
  EXPECT_EQ(cached, (std::vector<int32_t>{0, 28, 28, 28}));
  EXPECT_EQ(f.engine->wait_until_idle().num_scheduled_tokens, 30 + 3 * 2 + 4 * 5);
}

}  // namespace
}  // namespace sluice
