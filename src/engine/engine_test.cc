#include "engine/engine.h"

#include <latch>
#include <numeric>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "model/loader.h"
#include "model/model_maker.h"

namespace sluice {
namespace {

LoadedModel tiny_model(gguf::TensorType dtype = gguf::TensorType::kF32) {
  ModelSpec spec = *preset_spec("tiny");
  spec.dtype = dtype;
  auto w = make_model(spec);
  auto f = gguf::File::from_buffer(w->to_bytes(), "tiny");
  LoadedModel m;
  m.tokenizer = std::move(*Tokenizer::from_gguf(**f));
  m.model = std::move(*Model::load(std::move(*f)));
  return m;
}

struct Fixture {
  explicit Fixture(EngineConfig config = {}, gguf::TensorType dtype = gguf::TensorType::kF32, int threads = 2)
      : m(tiny_model(dtype)), pool(threads) {
    if (config.kv_cache_bytes == 0) config.kv_cache_bytes = 256 * block_bytes(config);
    auto e = Engine::create(*m.model, *m.tokenizer, pool, std::move(config));
    SLUICE_CHECK(e.has_value()) << e.error().message();
    engine = std::move(*e);
  }
  // After every test, every KV block is free again.
  ~Fixture() {
    if (check_blocks_on_exit) {
      EXPECT_EQ(engine->wait_until_idle().kv_blocks_used, 0);
    }
  }
  int64_t block_bytes(const EngineConfig& c) const {
    return static_cast<int64_t>(KvPool::bytes_per_token(m.model->config(), c.kv_type)) * c.block_size;
  }
  StreamOutput run(Request r) {
    auto h = engine->submit(std::move(r));
    SLUICE_CHECK(h.has_value()) << h.error().message();
    return h->wait();
  }
  Request request(std::string_view prompt, int32_t max_tokens) const {
    Request r;
    r.prompt_tokens = *m.tokenizer->encode(prompt);
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    return r;
  }
  LoadedModel m;
  ThreadPool pool;
  std::unique_ptr<Engine> engine;
  bool check_blocks_on_exit = true;
};

std::vector<int32_t> token_ids(const StreamOutput& o) {
  std::vector<int32_t> ids;
  for (const TokenOutput& t : o.tokens) ids.push_back(t.token_id);
  return ids;
}

// Bit-identical: same tokens, same logprobs to the bit, same text, same ending.
void expect_same_output(const StreamOutput& a, const StreamOutput& b, const std::string& what) {
  ASSERT_EQ(token_ids(a), token_ids(b)) << what;
  for (size_t i = 0; i < a.tokens.size(); ++i) {
    ASSERT_EQ(std::memcmp(&a.tokens[i].logprob, &b.tokens[i].logprob, sizeof(float)), 0) << what << " token " << i;
  }
  EXPECT_EQ(a.text, b.text) << what;
  EXPECT_EQ(a.finish_reason, b.finish_reason) << what;
}

// Holds the engine thread in its first step until `release` counts down, so a test can queue
// several requests before any of them runs.
void hold_first_step(EngineConfig& config, std::latch& release) {
  auto first = std::make_shared<bool>(true);
  config.on_step = [first, &release](const ScheduleOutput&) {
    if (std::exchange(*first, false)) release.wait();
  };
}

TEST(Engine, GreedyOutputDoesNotDependOnPromptChunking) {
  Fixture whole(EngineConfig{.max_batch_tokens = 512});
  Fixture chunked(EngineConfig{.max_num_seqs = 2, .max_batch_tokens = 3});
  Request r = whole.request("the quick brown fox jumps over the lazy dog", 12);
  r.logprobs = true;
  StreamOutput a = whole.run(r), b = chunked.run(r);
  EXPECT_EQ(a.tokens.size(), 12u);
  EXPECT_EQ(a.finish_reason, FinishReason::kLength);
  EXPECT_EQ(a.metrics.num_output_tokens, 12);
  expect_same_output(a, b, "chunked");
}

TEST(Engine, StreamedTextEqualsFinalTextAndDecode) {
  Fixture f;
  Request r = f.request("hello", 20);
  r.sampling.temperature = 1.0f;
  r.seed = 5;
  auto h = f.engine->submit(r);
  ASSERT_TRUE(h);
  std::string streamed;
  std::vector<int32_t> ids;
  for (;;) {
    StreamOutput o = h->next();
    streamed += o.text;
    for (auto& t : o.tokens) ids.push_back(t.token_id);
    if (o.finished) break;
  }
  EXPECT_EQ(ids.size(), 20u);
  EXPECT_EQ(streamed, f.m.tokenizer->decode(ids));
  EXPECT_EQ(token_ids(f.run(r)), ids);  // same seed, same tokens
  // After the end, next() keeps answering "finished" without blocking.
  StreamOutput again = h->next();
  EXPECT_TRUE(again.finished);
  EXPECT_TRUE(again.tokens.empty());
}

TEST(Engine, StopStringEndsTheOutputAndIsNotEmitted) {
  Fixture f;
  Request r = f.request("abc", 16);
  StreamOutput full = f.run(r);
  ASSERT_GE(full.text.size(), 4u);
  const std::string stop = full.text.substr(2, 2);
  r.stop_strings = {stop};
  StreamOutput cut = f.run(r);
  EXPECT_EQ(cut.finish_reason, FinishReason::kStop);
  EXPECT_EQ(cut.stop_matched, stop);
  EXPECT_EQ(cut.text, full.text.substr(0, full.text.find(stop)));
}

TEST(Engine, StopTokenIdEndsTheOutput) {
  Fixture f;
  Request r = f.request("abc", 10);
  StreamOutput full = f.run(r);
  const int32_t stop_id = full.tokens[3].token_id;
  r.stop_token_ids = {stop_id};
  StreamOutput cut = f.run(r);
  EXPECT_EQ(cut.finish_reason, FinishReason::kStop);
  auto ids = token_ids(full);
  EXPECT_EQ(cut.tokens.size(), static_cast<size_t>(std::find(ids.begin(), ids.end(), stop_id) - ids.begin()) + 1);
}

TEST(Engine, IncludeStopStrInOutputKeepsTheStopString) {
  Fixture f;
  Request r = f.request("abc", 16);
  StreamOutput full = f.run(r);
  ASSERT_GE(full.text.size(), 4u);
  const std::string stop = full.text.substr(2, 2);
  r.stop_strings = {stop};
  r.include_stop_str_in_output = true;
  StreamOutput cut = f.run(r);
  EXPECT_EQ(cut.finish_reason, FinishReason::kStop);
  EXPECT_EQ(cut.text, full.text.substr(0, full.text.find(stop) + stop.size()));
}

// min_tokens: the stop token cannot come (probability 0) and stop strings are not matched
// until min_tokens tokens are out; after them both work as usual.
TEST(Engine, MinTokensHoldsOffStopTokensAndStopStrings) {
  Fixture f;
  Request r = f.request("abc", 24);
  const StreamOutput full = f.run(r);
  const int32_t first = full.tokens[0].token_id;
  r.stop_token_ids = {first};
  EXPECT_EQ(f.run(r).tokens.size(), 1u);  // without min_tokens: stops at once
  r.min_tokens = 6;
  r.logprobs = true;
  r.sampling.top_logprobs = 5;
  const StreamOutput held = f.run(r);
  ASSERT_GE(held.tokens.size(), 6u);
  for (size_t i = 0; i < held.tokens.size(); ++i) {
    const bool listed = std::any_of(held.tokens[i].top.begin(), held.tokens[i].top.end(),
                                    [&](const TokenLogprob& t) { return t.token_id == first; });
    if (i < 6) {
      EXPECT_NE(held.tokens[i].token_id, first) << i;
      EXPECT_FALSE(listed) << "token " << i << ": a suppressed token has probability 0";
    }
  }
  if (held.finish_reason == FinishReason::kStop) {
    EXPECT_EQ(held.tokens.back().token_id, first);
  }
  Request bad = r;
  bad.min_tokens = 25;
  auto refused = f.engine->submit(bad);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("min_tokens must be in [0, max_tokens = 24], got 25"), std::string::npos);

  // A stop string at the very start of the text is not matched within the first 3 tokens.
  Request s = f.request("abc", 24);
  s.stop_strings = {full.text.substr(0, 2)};
  ASSERT_EQ(f.run(s).text, "");
  s.min_tokens = 3;
  const StreamOutput late = f.run(s);
  const std::string first3 = f.m.tokenizer->decode(std::vector<int32_t>{full.tokens[0].token_id,
                                                                         full.tokens[1].token_id,
                                                                         full.tokens[2].token_id});
  EXPECT_TRUE(full.text.starts_with(late.text));
  EXPECT_GE(late.text.size(), first3.size()) << late.text;
}

TEST(Engine, InvalidRequestsAreRefusedWithClearErrors) {
  Fixture f;
  const int32_t ctx = f.m.model->config().context_length;
  auto expect_invalid = [&](Request r, std::string_view needle) {
    auto h = f.engine->submit(std::move(r));
    ASSERT_FALSE(h);
    EXPECT_EQ(h.error().code(), StatusCode::kInvalid);
    EXPECT_NE(h.error().message().find(needle), std::string::npos) << h.error().message();
  };
  Request r = f.request("a", 4);
  r.prompt_tokens.assign(ctx, 5);
  expect_invalid(r, fmt::format("the prompt has {} tokens; it must be shorter than the model's context of {}", ctx, ctx));
  r.prompt_tokens.clear();
  expect_invalid(r, "the prompt is empty");
  r.prompt_tokens = {1, 512};
  expect_invalid(r, "prompt token 512 (at index 1) is outside the vocabulary (0..511)");
  r.prompt_tokens = {1, 2};
  r.sampling.temperature = -1;
  expect_invalid(r, "temperature");
  r.sampling.temperature = 0;
  r.max_tokens = -1;
  expect_invalid(r, "max tokens must be >= 0");
  r.max_tokens = 1;
  r.stop_token_ids = {-3};
  expect_invalid(r, "stop token id -3");
  EXPECT_EQ(f.engine->metrics().num_requests_rejected, 6);
}

TEST(Engine, MaxTokensIsClampedToTheContextAndTheKvPool) {
  Fixture f;
  const int32_t ctx = f.m.model->config().context_length;
  Request r = f.request("a", 100);
  r.prompt_tokens.assign(ctx - 3, 5);
  StreamOutput o = f.run(r);
  EXPECT_EQ(o.tokens.size(), 3u);
  EXPECT_EQ(o.finish_reason, FinishReason::kLength);
  r.max_tokens = 0;
  o = f.run(r);
  EXPECT_TRUE(o.tokens.empty());
  EXPECT_EQ(o.finish_reason, FinishReason::kLength);
  // A pool of 4 blocks of 16 holds 64 tokens: a prompt of 60 gets 4 more.
  EngineConfig small;
  small.kv_cache_bytes = 4 * f.block_bytes(small);
  Fixture g(small);
  EXPECT_EQ(g.engine->kv_capacity_tokens(), 64);
  r.prompt_tokens.assign(60, 5);
  r.max_tokens = 100;
  EXPECT_EQ(g.run(r).tokens.size(), 4u);
  r.prompt_tokens.assign(64, 5);
  auto h = g.engine->submit(r);
  ASSERT_FALSE(h);
  EXPECT_NE(h.error().message().find("the KV cache holds only 64 tokens"), std::string::npos) << h.error().message();
}

// Random prompts and output lengths, greedy and seeded sampling.
std::vector<Request> random_requests(const Fixture& f, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Request> reqs;
  for (int i = 0; i < n; ++i) {
    Request r;
    r.prompt_tokens.resize(1 + rng() % 48);
    for (auto& t : r.prompt_tokens) t = static_cast<int32_t>(rng() % f.m.model->config().vocab_size);
    r.max_tokens = 1 + static_cast<int32_t>(rng() % 40);
    r.ignore_eos = true;
    r.logprobs = true;
    if (i % 2) {
      r.sampling.temperature = 0.9f;
      r.sampling.top_k = 50;
      r.seed = rng();
    }
    r.priority = static_cast<int32_t>(rng() % 2);
    reqs.push_back(std::move(r));
  }
  return reqs;
}

// Submits every request from `num_threads` threads, each starting after the previous thread's
// first request, and collects the outputs in request order.
std::vector<StreamOutput> run_concurrently(Engine& engine, const std::vector<Request>& reqs, int num_threads) {
  std::vector<StreamOutput> outs(reqs.size());
  std::vector<std::thread> threads;
  for (int t = 0; t < num_threads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::pair<size_t, RequestHandle>> mine;
      for (size_t i = t; i < reqs.size(); i += num_threads) {
        auto h = engine.submit(reqs[i]);
        SLUICE_CHECK(h.has_value()) << h.error().message();
        mine.emplace_back(i, std::move(*h));
        // Staggered: wait for some output of the earliest stream before submitting more.
        if (mine.size() % 4 == 0) {
          StreamOutput part = mine.front().second.next();
          StreamOutput& o = outs[mine.front().first];
          o.tokens.insert(o.tokens.end(), part.tokens.begin(), part.tokens.end());
          o.text += part.text;
          if (part.finished) o.finished = true, o.finish_reason = part.finish_reason;
        }
      }
      for (auto& [i, h] : mine) {
        StreamOutput rest = h.wait();
        rest.tokens.insert(rest.tokens.begin(), outs[i].tokens.begin(), outs[i].tokens.end());
        rest.text = outs[i].text + rest.text;
        if (outs[i].finished) rest.finish_reason = outs[i].finish_reason;
        outs[i] = std::move(rest);
      }
    });
  }
  for (auto& th : threads) th.join();
  return outs;
}

// Runs every request alone on `alone`, then all of them concurrently on `busy`: each output must
// be bit-identical to its run alone.
void expect_concurrent_matches_alone(Fixture& alone, Engine& busy, const std::vector<Request>& reqs) {
  std::vector<StreamOutput> expected;
  for (const Request& r : reqs) expected.push_back(alone.run(r));
  auto got = run_concurrently(busy, reqs, 4);
  for (size_t i = 0; i < reqs.size(); ++i) expect_same_output(got[i], expected[i], fmt::format("request {}", i));
}

class EngineInvariance : public ::testing::TestWithParam<gguf::TensorType> {};

TEST_P(EngineInvariance, ConcurrentRequestsMatchRunningEachAlone) {
  const EngineConfig config{.max_num_seqs = 8, .max_batch_tokens = 40, .coalesce = false};
  Fixture alone(EngineConfig{.max_num_seqs = 1, .max_batch_tokens = 40}, GetParam(), 1);
  Fixture busy(config, GetParam(), 2);
  expect_concurrent_matches_alone(alone, *busy.engine, random_requests(busy, 64, 3));
  EngineMetrics m = busy.engine->wait_until_idle();
  EXPECT_GT(m.seqs_per_step.sum() / m.num_steps, 2.0) << "requests did not share steps";
  EXPECT_EQ(m.kv_blocks_used, 0);
  EXPECT_EQ(m.num_requests_finished[static_cast<int>(FinishReason::kLength)], 64);
}

TEST_P(EngineInvariance, PreemptionUnderATinyPoolLosesNothing) {
  EngineConfig config{.max_num_seqs = 16, .max_batch_tokens = 64, .block_size = 4, .coalesce = false};
  Fixture alone(EngineConfig{.max_num_seqs = 1, .max_batch_tokens = 64, .block_size = 4}, GetParam(), 1);
  // 24 blocks of 4 = 96 tokens: any one request fits (at most 48 + 40), a few together do not.
  Fixture probe(config, GetParam());
  config.kv_cache_bytes = 24 * probe.block_bytes(config);
  Fixture tight(config, GetParam(), 2);
  expect_concurrent_matches_alone(alone, *tight.engine, random_requests(tight, 64, 4));
  EngineMetrics m = tight.engine->wait_until_idle();
  EXPECT_GT(m.num_preemptions, 10);
  EXPECT_EQ(m.kv_blocks_used, 0);
  EXPECT_EQ(m.kv_blocks_free + m.kv_blocks_cached, 24);  // what is not free stays cached
}

INSTANTIATE_TEST_SUITE_P(Types, EngineInvariance, ::testing::Values(gguf::TensorType::kF32, gguf::TensorType::kQ8_0),
                         [](const auto& info) { return std::string(gguf::tensor_type_name(info.param)); });

TEST(Engine, CancelMidPromptAndMidDecodeFreesEveryBlock) {
  std::latch submitted(1);
  int steps = 0;
  std::optional<RequestHandle> prompt_req, decode_req;
  EngineConfig config{.max_num_seqs = 4, .max_batch_tokens = 8};
  config.on_step = [&](const ScheduleOutput&) {
    // Engine thread, after step n: cancel requests at known points of their lives.
    if (++steps == 1) submitted.wait();      // both handles are in place
    if (steps == 3) prompt_req->cancel();   // its 200-token prompt needs 25 steps of 8
    if (steps == 6) decode_req->cancel();
  };
  Fixture f(config);
  Request long_prompt = f.request("x", 10);
  long_prompt.prompt_tokens.assign(200, 7);
  Request short_prompt = f.request("hello", 400);
  decode_req = std::move(*f.engine->submit(short_prompt));
  prompt_req = std::move(*f.engine->submit(long_prompt));
  submitted.count_down();
  StreamOutput a = prompt_req->wait();
  StreamOutput b = decode_req->wait();
  EXPECT_EQ(a.finish_reason, FinishReason::kCancelled);
  EXPECT_TRUE(a.tokens.empty());
  EXPECT_EQ(b.finish_reason, FinishReason::kCancelled);
  EXPECT_GE(b.tokens.size(), 4u);
  EXPECT_LT(b.tokens.size(), 10u);
  EngineMetrics m = f.engine->wait_until_idle();
  EXPECT_EQ(m.kv_blocks_used, 0);
  EXPECT_EQ(m.num_requests_finished[static_cast<int>(FinishReason::kCancelled)], 2);
}

TEST(Engine, DroppingAHandleCancelsItsRequest) {
  Fixture f;
  {
    auto h = f.engine->submit(f.request("hello", 400));
    ASSERT_TRUE(h);
    h->next();
  }
  EngineMetrics m = f.engine->wait_until_idle();
  EXPECT_EQ(m.num_requests_finished[static_cast<int>(FinishReason::kCancelled)], 1);
  EXPECT_EQ(m.kv_blocks_used, 0);
}

TEST(Engine, OverloadIsRefusedAtOnceAndNothingHangs) {
  std::latch release(1);
  EngineConfig config{.max_num_seqs = 1, .max_queued_requests = 3};
  hold_first_step(config, release);  // hold the engine while the test submits
  Fixture f(config);
  std::vector<RequestHandle> accepted;
  int refused = 0;
  for (int i = 0; i < 10; ++i) {
    Request r = f.request("hello", 5);
    r.prompt_tokens.push_back(i);  // all different: no coalescing
    auto h = f.engine->submit(r);
    if (h) {
      accepted.push_back(std::move(*h));
    } else {
      EXPECT_EQ(h.error().code(), StatusCode::kOverloaded);
      EXPECT_NE(h.error().message().find("overloaded: 3 requests are already waiting (--max-queued-requests 3)"),
                std::string::npos)
          << h.error().message();
      ++refused;
    }
  }
  // The first is running (or about to): three wait behind it at most.
  EXPECT_GE(accepted.size(), 3u);
  EXPECT_LE(accepted.size(), 4u);
  EXPECT_EQ(refused, 10 - static_cast<int>(accepted.size()));
  release.count_down();
  for (auto& h : accepted) EXPECT_EQ(h.wait().tokens.size(), 5u);
  EngineMetrics m = f.engine->wait_until_idle();
  EXPECT_EQ(m.num_requests_overloaded, refused);
}

TEST(Engine, IdenticalRequestsShareOneComputation) {
  std::latch release(1);
  EngineConfig config;
  hold_first_step(config, release);
  Fixture f(config);
  Request r = f.request("the same question", 24);
  r.logprobs = true;
  std::vector<RequestHandle> handles;
  for (int i = 0; i < 8; ++i) handles.push_back(std::move(*f.engine->submit(r)));
  release.count_down();
  std::vector<StreamOutput> outs;
  for (auto& h : handles) outs.push_back(h.wait());
  for (int i = 1; i < 8; ++i) expect_same_output(outs[i], outs[0], fmt::format("request {}", i));
  EngineMetrics m = f.engine->wait_until_idle();
  EXPECT_EQ(m.num_requests_coalesced, 7);
  EXPECT_EQ(m.num_steps, 24);  // one computation: one prompt step, then 23 decode steps
  // Seeded sampling coalesces too; unseeded sampling never does.
  r.sampling.temperature = 0.8f;
  r.seed = 42;
  auto s1 = f.engine->submit(r), s2 = f.engine->submit(r);
  expect_same_output(s1->wait(), s2->wait(), "seeded");
  r.seed.reset();
  auto u1 = f.engine->submit(r), u2 = f.engine->submit(r);
  u1->wait(), u2->wait();
  EXPECT_EQ(f.engine->wait_until_idle().num_requests_coalesced, 7 + 1);
}

TEST(Engine, ALateIdenticalRequestGetsTheWholeOutput) {
  Fixture* fp = nullptr;
  std::optional<RequestHandle> late;
  Request r;
  int steps = 0;
  EngineConfig config;
  config.on_step = [&](const ScheduleOutput&) {
    if (++steps == 6) late = std::move(*fp->engine->submit(r));  // joins mid-decode
  };
  Fixture f(config);
  fp = &f;
  r = f.request("tell me a story", 20);
  StreamOutput first = f.run(r);
  StreamOutput second = late->wait();
  expect_same_output(second, first, "late");
  EXPECT_TRUE(second.metrics.coalesced);
  EXPECT_EQ(f.engine->wait_until_idle().num_requests_coalesced, 1);
}

TEST(Engine, CancellingOneOfTwoCoalescedRequestsKeepsTheOther) {
  std::latch release(1);
  EngineConfig config;
  hold_first_step(config, release);
  Fixture f(config);
  Request r = f.request("shared", 30);
  auto a = f.engine->submit(r), b = f.engine->submit(r);
  a->cancel();
  release.count_down();
  EXPECT_EQ(a->wait().finish_reason, FinishReason::kCancelled);
  StreamOutput out = b->wait();
  EXPECT_EQ(out.finish_reason, FinishReason::kLength);
  EXPECT_EQ(out.tokens.size(), 30u);
  EXPECT_EQ(f.engine->wait_until_idle().kv_blocks_used, 0);
}

TEST(Engine, ShutdownEndsEveryOutstandingRequest) {
  std::optional<RequestHandle> h1, h2;
  {
    Fixture f(EngineConfig{.max_num_seqs = 1});
    f.check_blocks_on_exit = false;  // the point is to leave with requests outstanding
    h1 = std::move(*f.engine->submit(f.request("one", 400)));
    h2 = std::move(*f.engine->submit(f.request("two", 400)));
    h1->next();
  }  // engine destroyed with both outstanding
  StreamOutput a = h1->wait(), b = h2->wait();
  EXPECT_EQ(a.finish_reason, FinishReason::kCancelled);
  EXPECT_EQ(a.error, "engine shut down");
  EXPECT_EQ(b.finish_reason, FinishReason::kCancelled);
}

// Requests built from a few shared system prompts and chat histories, some sharing whole
// prompts, greedy and seeded.
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
  EXPECT_EQ(cache_off.engine->wait_until_idle().prefix_cache_hit_tokens, 0);
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

TEST(Engine, ImpossibleConfigurationsAreRefused) {
  LoadedModel m = tiny_model();
  ThreadPool pool(1);
  auto expect_error = [&](EngineConfig c, std::string_view needle) {
    auto e = Engine::create(*m.model, *m.tokenizer, pool, std::move(c));
    ASSERT_FALSE(e);
    EXPECT_NE(e.error().message().find(needle), std::string::npos) << e.error().message();
  };
  expect_error({.max_num_seqs = 0}, "max-num-seqs must be >= 1, got 0");
  expect_error({.max_num_seqs = 8, .max_batch_tokens = 4}, "max-batch-tokens (4) must be at least max-num-seqs (8)");
  expect_error({.max_queued_requests = 0}, "max-queued-requests must be >= 1");
  expect_error({.block_size = 0}, "block size must be in [1, 1024], got 0");
  expect_error({.kv_cache_bytes = 100}, "a KV cache of 100 bytes holds no block");
  expect_error({.kv_eviction = "fifo"}, "unknown KV eviction policy 'fifo' (choices: lru, lfu, pinned)");
}

TEST(Engine, MetricsCountTokensStepsAndTimes) {
  Fixture f;
  StreamOutput o = f.run(f.request("count me", 8));
  EngineMetrics m = f.engine->wait_until_idle();
  EXPECT_EQ(m.num_generation_tokens, 8);
  EXPECT_EQ(m.num_prompt_tokens, o.metrics.num_prompt_tokens);
  EXPECT_EQ(m.num_steps, 8);
  EXPECT_EQ(m.num_scheduled_tokens, o.metrics.num_prompt_tokens + 7);
  EXPECT_EQ(m.ttft_seconds.count(), 1);
  EXPECT_EQ(m.tpot_seconds.count(), 1);
  EXPECT_GE(o.metrics.e2e_seconds, o.metrics.ttft_seconds);
  EXPECT_GE(o.metrics.ttft_seconds, o.metrics.queue_seconds);
  EXPECT_EQ(m.kv_blocks_total, 256);
}

}  // namespace
}  // namespace sluice
