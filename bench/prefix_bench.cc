// prefix_bench: the prefix cache on two workloads, cache on vs off, in one run (in process).
//
//   shared-prompt  N requests at once sharing one S-token system prompt, each with its own
//                  Q-token question and O output tokens
//   chat           C conversations x T turns under one S-token system prompt, each turn resending
//                  the whole history (system prompt, earlier messages and answers) plus a new
//                  M-token message, A output tokens per answer; conversations run concurrently,
//                  the turns of one conversation in order
//
// Reported per workload and setting: mean time to first token, total time, and the warm cache
// hit rate per token (cached prompt tokens / prompt tokens) and per request (requests with a
// cached block / requests).
//
// Usage: prefix_bench [-m FILE.gguf | --preset NAME --dtype TYPE] [--threads N] [--scale F]
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include <CLI/CLI.hpp>

#include "engine/engine.h"
#include "kernels/matmul.h"
#include "bench/bench_model.h"

namespace sluice::bench {
namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Result {
  double mean_ttft = 0;
  double total_seconds = 0;
  double token_hit_rate = 0;
  double request_hit_rate = 0;
  int64_t requests = 0;
};

Result summarize(Engine& engine, double start, double sum_ttft, int64_t requests) {
  EngineMetrics m = engine.wait_until_idle();
  Result r;
  r.total_seconds = now() - start;
  r.mean_ttft = sum_ttft / static_cast<double>(requests);
  r.requests = requests;
  r.token_hit_rate = m.prefix_cache_query_tokens ? double(m.prefix_cache_hit_tokens) / m.prefix_cache_query_tokens : 0;
  r.request_hit_rate =
      m.prefix_cache_query_requests ? double(m.prefix_cache_hit_requests) / m.prefix_cache_query_requests : 0;
  return r;
}

std::vector<int32_t> random_tokens(std::mt19937& rng, int n, int32_t vocab) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % vocab);
  return t;
}

Result shared_prompt(Engine& engine, int32_t vocab, int n, int system_len, int question_len, int output_len) {
  std::mt19937 rng(7);
  const auto system = random_tokens(rng, system_len, vocab);
  std::vector<RequestHandle> handles;
  const double start = now();
  for (int i = 0; i < n; ++i) {
    Request r;
    r.prompt_tokens = system;
    const auto q = random_tokens(rng, question_len, vocab);
    r.prompt_tokens.insert(r.prompt_tokens.end(), q.begin(), q.end());
    r.max_tokens = output_len;
    r.ignore_eos = true;
    handles.push_back(std::move(*engine.submit(std::move(r))));
  }
  double sum_ttft = 0;
  for (auto& h : handles) sum_ttft += h.wait().metrics.ttft_seconds;
  return summarize(engine, start, sum_ttft, n);
}

Result chat(Engine& engine, int32_t vocab, int conversations, int turns, int system_len, int message_len,
            int answer_len) {
  std::vector<std::thread> threads;
  std::vector<double> ttft(conversations, 0);
  std::mt19937 system_rng(99);
  const auto system = random_tokens(system_rng, system_len, vocab);
  const double start = now();
  for (int c = 0; c < conversations; ++c) {
    threads.emplace_back([&, c] {
      std::mt19937 rng(100 + c);
      std::vector<int32_t> history = system;
      for (int t = 0; t < turns; ++t) {
        const auto msg = random_tokens(rng, message_len, vocab);
        history.insert(history.end(), msg.begin(), msg.end());
        Request r;
        r.prompt_tokens = history;
        r.max_tokens = answer_len;
        r.ignore_eos = true;
        StreamOutput out = engine.submit(std::move(r))->wait();
        ttft[c] += out.metrics.ttft_seconds;
        for (const auto& tok : out.tokens) history.push_back(tok.token_id);
      }
    });
  }
  for (auto& t : threads) t.join();
  double sum = 0;
  for (double x : ttft) sum += x;
  return summarize(engine, start, sum, int64_t{conversations} * turns);
}

void print(const char* workload, const Result& off, const Result& on) {
  std::printf("| %s | off | %d | %.2f s | %.1f s | %.1f%% | %.1f%% |\n", workload, int(off.requests), off.mean_ttft,
              off.total_seconds, 100 * off.token_hit_rate, 100 * off.request_hit_rate);
  std::printf("| %s | on | %d | %.2f s | %.1f s | %.1f%% | %.1f%% |\n", workload, int(on.requests), on.mean_ttft,
              on.total_seconds, 100 * on.token_hit_rate, 100 * on.request_hit_rate);
  std::printf("| %s | on vs off | | %.1fx lower | %.1fx lower | | |\n", workload, off.mean_ttft / on.mean_ttft,
              off.total_seconds / on.total_seconds);
  std::fflush(stdout);
}

}  // namespace
}  // namespace sluice::bench

int main(int argc, char** argv) {
  using namespace sluice;
  CLI::App app{"prefix_bench: the prefix cache on a shared-prompt and a multi-turn chat workload, on vs off"};
  std::string model_path, preset = "qwen2.5-0.5b", dtype = "q8_0", workloads = "shared-prompt,chat";
  int threads = 2;
  double scale = 1.0;
  app.add_option("-m,--model", model_path, "GGUF model (default: make --preset/--dtype in memory)");
  app.add_option("--preset", preset, "Preset shape of the in-memory model")->capture_default_str();
  app.add_option("--dtype", dtype, "Weight type of the in-memory model: f32, f16, bf16, q8_0")->capture_default_str();
  app.add_option("-t,--threads", threads, "Threads; 0 = one per core")->capture_default_str();
  app.add_option("--scale", scale,
                 "Scales every length (1: shared-prompt 32 x (1024 + 64) -> 64; chat 8 conversations x 6 turns, "
                 "system prompt 256, messages 32, answers 64)")
      ->capture_default_str();
  app.add_option("--workloads", workloads, "shared-prompt, chat, or both")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::string description;
  LoadedModel m = bench::load_bench_model(model_path, preset, dtype, description);
  model_path = description;
  auto len = [&](int x) { return std::max(1, static_cast<int>(x * scale)); };
  ThreadPool pool(threads);
  const int32_t vocab = m.model->config().vocab_size;
  std::printf("model: %s, threads: %d, SIMD: %s, scale %.2f\n", model_path.c_str(), pool.num_threads(),
              kernels::simd_target_name(), scale);
  std::printf("| workload | prefix cache | requests | mean time to first token | total time | hit rate (tokens) | "
              "hit rate (requests) |\n|---|---|---:|---:|---:|---:|---:|\n");
  auto make_engine = [&](bool cache) {
    EngineConfig c;
    c.max_num_seqs = 32;
    c.prefix_caching = cache;
    c.kv_cache_bytes = static_cast<int64_t>(KvPool::bytes_per_token(m.model->config(), c.kv_type)) * 65536;
    auto e = Engine::create(*m.model, *m.tokenizer, pool, c);
    if (!e) {
      std::fprintf(stderr, "%s\n", e.error().message().c_str());
      std::exit(1);
    }
    return std::move(*e);
  };
  if (workloads.find("shared-prompt") != std::string::npos) {
    auto off_engine = make_engine(false);
    auto off = bench::shared_prompt(*off_engine, vocab, 32, len(1024), len(64), len(64));
    off_engine.reset();
    auto on_engine = make_engine(true);
    auto on = bench::shared_prompt(*on_engine, vocab, 32, len(1024), len(64), len(64));
    bench::print("shared-prompt", off, on);
  }
  if (workloads.find("chat") != std::string::npos) {
    auto off_engine = make_engine(false);
    auto off = bench::chat(*off_engine, vocab, 8, 6, len(256), len(32), len(64));
    off_engine.reset();
    auto on_engine = make_engine(true);
    auto on = bench::chat(*on_engine, vocab, 8, 6, len(256), len(32), len(64));
    bench::print("chat", off, on);
  }
  return 0;
}
