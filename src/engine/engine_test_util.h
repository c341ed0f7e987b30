// What the engine's tests share: a tiny random-weight model, a fixture that checks every KV
// block is free at the end, and comparisons of outputs to the bit.
#pragma once

#include <cstring>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "common/check.h"
#include "engine/engine.h"
#include "model/loader.h"
#include "model/model_maker.h"

namespace sluice::engine_test {

inline LoadedModel tiny_model(gguf::TensorType dtype = gguf::TensorType::kF32, const char* preset = "tiny") {
  ModelSpec spec = *preset_spec(preset);
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

inline std::vector<int32_t> token_ids(const StreamOutput& o) {
  std::vector<int32_t> ids;
  for (const TokenOutput& t : o.tokens) ids.push_back(t.token_id);
  return ids;
}

// Bit-identical: same tokens, same logprobs to the bit, same text, same ending.
inline void expect_same_output(const StreamOutput& a, const StreamOutput& b, const std::string& what) {
  ASSERT_EQ(token_ids(a), token_ids(b)) << what;
  for (size_t i = 0; i < a.tokens.size(); ++i) {
    ASSERT_EQ(std::memcmp(&a.tokens[i].logprob, &b.tokens[i].logprob, sizeof(float)), 0) << what << " token " << i;
  }
  EXPECT_EQ(a.text, b.text) << what;
  EXPECT_EQ(a.finish_reason, b.finish_reason) << what;
}

// Holds the engine thread in its first step until `release` counts down, so a test can queue
// several requests before any of them runs.
inline void hold_first_step(EngineConfig& config, std::latch& release) {
  auto first = std::make_shared<bool>(true);
  config.on_step = [first, &release](const ScheduleOutput&) {
    if (std::exchange(*first, false)) release.wait();
  };
}

// Submits every request from `num_threads` threads, each starting after the previous thread's
// first request, and collects the outputs in request order.
inline std::vector<StreamOutput> run_concurrently(Engine& engine, const std::vector<Request>& reqs, int num_threads) {
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

// The four prompts speculation is tested on (repeats, a sequence, a story), 40 tokens each, with
// logprobs; sampled with every sampler knob and one seed each, or greedy.
inline std::vector<Request> test_requests(const Fixture& f, bool sampled) {
  std::vector<Request> rs;
  for (const char* prompt : {"the cat sat on the mat, the cat sat on the", "hello hello hello", "a b c d e f g a b c",
                             "once upon a time there was"}) {
    Request r = f.request(prompt, 40);
    r.logprobs = true;
    r.sampling.top_logprobs = 3;
    if (sampled) {
      r.sampling.temperature = 0.9f;
      r.sampling.top_k = 40;
      r.sampling.top_p = 0.95f;
      r.sampling.repetition_penalty = 1.1f;
      r.sampling.frequency_penalty = 0.2f;
      r.seed = 1234 + rs.size();
    }
    rs.push_back(std::move(r));
  }
  return rs;
}

}  // namespace sluice::engine_test
