#include "engine/engine.h"

#include <latch>
#include <numeric>
#include <random>
#include <thread>

#include "engine/engine_test_util.h"

namespace sluice {
namespace {

using namespace engine_test;

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

// The choices of one API request go in together or not at all.
TEST(Engine, SubmitAllIsAllOrNothing) {
  EngineConfig config{.max_queued_requests = 3};
  std::latch release(1);
  hold_first_step(config, release);
  Fixture f(config);
  std::vector<Request> four(4, f.request("choices", 3));
  for (size_t i = 0; i < four.size(); ++i) four[i].seed = i, four[i].sampling.temperature = 1.0f;
  auto refused = f.engine->submit_all(four);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), StatusCode::kOverloaded);
  EXPECT_NE(refused.error().message().find("no room for these 4"), std::string::npos) << refused.error().message();
  std::vector<Request> bad = {f.request("ok", 3), f.request("ok", 3)};
  bad[1].max_tokens = -1;
  EXPECT_FALSE(f.engine->submit_all(bad));
  EngineMetrics m = f.engine->metrics();
  EXPECT_EQ(m.num_requests_submitted, 0);
  EXPECT_EQ(m.num_requests_rejected, 2);
  four.pop_back();
  auto three = f.engine->submit_all(four);
  ASSERT_TRUE(three) << three.error().message();
  release.count_down();
  for (RequestHandle& h : *three) EXPECT_EQ(h.wait().tokens.size(), 3u);
  EXPECT_EQ(f.engine->wait_until_idle().num_requests_submitted, 3);
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
  // Seeded sampling coalesces too; unseeded sampling never does. Each pair goes in while the
  // engine holds its first step, so the second always finds the first still running.
  for (const bool seeded : {true, false}) {
    SCOPED_TRACE(seeded ? "seeded" : "unseeded");
    std::latch hold(1);
    EngineConfig c;
    hold_first_step(c, hold);
    Fixture g(c);
    Request s = g.request("the same question", 24);
    s.sampling.temperature = 0.8f;
    if (seeded) s.seed = 42;
    auto a = g.engine->submit(s), b = g.engine->submit(s);
    hold.count_down();
    const StreamOutput out_a = a->wait(), out_b = b->wait();
    if (seeded) expect_same_output(out_a, out_b, "seeded");
    EXPECT_EQ(g.engine->wait_until_idle().num_requests_coalesced, seeded ? 1 : 0);
  }
  // Another priority does not join: it would wait at the first one's.
  std::latch hold(1);
  EngineConfig c;
  hold_first_step(c, hold);
  Fixture g(c);
  Request low = g.request("the same question", 4), high = low;
  low.priority = 10;
  high.priority = 0;
  auto a = g.engine->submit(low), b = g.engine->submit(high);
  hold.count_down();
  expect_same_output(a->wait(), b->wait(), "priorities");
  EXPECT_EQ(g.engine->wait_until_idle().num_requests_coalesced, 0);
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

// A late follower gets the output so far at once, at its first token; its time per output
// token is over the tokens after those, so it is the pace of the stream, as the leader's (with
// a clock that ticks one second a step, both are one second a token).
TEST(Engine, ALateFollowersTimePerOutputTokenIsThePaceAfterItJoined) {
  Fixture* fp = nullptr;
  std::optional<RequestHandle> late;
  Request r;
  std::atomic<int> steps = 0;
  EngineConfig config;
  config.clock = [&] { return static_cast<double>(steps.load()); };
  config.on_step = [&](const ScheduleOutput&) {
    if (++steps == 8) late = std::move(*fp->engine->submit(r));
  };
  Fixture f(config);
  fp = &f;
  r = f.request("tell me a story", 24);
  r.ignore_eos = true;
  StreamOutput first = f.run(r);
  StreamOutput second = late->wait();
  ASSERT_TRUE(second.metrics.coalesced);
  EXPECT_NEAR(first.metrics.tpot_seconds, 1.0, 0.1);
  EXPECT_NEAR(second.metrics.tpot_seconds, 1.0, 0.2) << "not its seconds after joining over all 23 gaps";
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

// Requests still in the inbox when the engine shuts down are finished (cancelled) and counted
// as such: every submitted request is counted once among the finished.
TEST(Engine, ShutdownCountsEveryRequestItEnds) {
  std::latch in_step(1), release(1);
  EngineConfig config;
  auto first = std::make_shared<bool>(true);
  config.on_step = [&, first](const ScheduleOutput&) {
    if (!std::exchange(*first, false)) return;
    in_step.count_down();
    release.wait();
  };
  Fixture f(config);
  f.check_blocks_on_exit = false;
  auto a = f.engine->submit(f.request("one", 50));
  in_step.wait();  // the engine is in its first step: the next two wait in the inbox
  auto b = f.engine->submit(f.request("two", 50)), c = f.engine->submit(f.request("three", 50));
  std::thread stopper([&] { f.engine->shutdown(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // shutdown() has closed the inbox
  release.count_down();
  stopper.join();
  for (auto* h : {&a, &b, &c}) EXPECT_EQ((*h)->wait().finish_reason, FinishReason::kCancelled);
  const EngineMetrics m = f.engine->metrics();
  int64_t finished = 0;
  for (int64_t n : m.num_requests_finished) finished += n;
  EXPECT_EQ(m.num_requests_submitted, 3);
  EXPECT_EQ(finished, 3);
}

// Requests built from a few shared system prompts and chat histories, some sharing whole
// prompts, greedy and seeded.
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
