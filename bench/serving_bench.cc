// serving_bench: the engine under concurrent load, in process (no HTTP), as ratios in one run.
//
// For each concurrency C it submits C requests at once (distinct random prompts of --prompt
// tokens, exactly --output tokens each) and waits for all of them:
//   aggregate output tokens/s  = C * output / wall time (prompts included), and its ratio to C = 1;
//   decode step time at B seqs = mean time of steps that ran B decode tokens and nothing else,
//                                and its ratio to the step at 1 sequence.
//
// Usage: serving_bench [-m FILE.gguf | --preset NAME --dtype TYPE] [--threads N] [--prompt P]
//                      [--output O] [--concurrency 1,2,4,...] [--max-batch-tokens T] [--kv-cache-dtype f16|f32]
//                      [--paths avx2,amx,...]  (every kernel path the machine runs, side by side)
#include <chrono>
#include <cstdio>
#include <map>
#include <random>

#include <CLI/CLI.hpp>

#include "engine/engine.h"
#include "kernels/kernel_path.h"
#include "kernels/matmul.h"
#include "bench/bench_model.h"
#include "bench/peak.h"

namespace sluice::bench {
namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Run {
  double tokens_per_second = 0;
  double mean_ttft = 0;  // seconds, over the requests
  std::map<size_t, std::pair<double, int>> decode_steps;  // batch -> (sum of seconds, count)
};

Run run(Model& model, const Tokenizer& tok, ThreadPool& pool, EngineConfig config, int concurrency, int prompt_len,
        int output_len, uint32_t seed) {
  Run r;
  double last = 0;
  config.max_num_seqs = std::max(config.max_num_seqs, concurrency);
  config.on_step = [&](const ScheduleOutput& out) {
    const double t = now();
    if (out.num_tokens == static_cast<int32_t>(out.seqs.size()) && last > 0) {
      auto& [sum, n] = r.decode_steps[out.seqs.size()];
      sum += t - last;
      ++n;
    }
    last = t;
  };
  auto engine = Engine::create(model, tok, pool, config);
  if (!engine) {
    std::fprintf(stderr, "%s\n", engine.error().message().c_str());
    std::exit(1);
  }
  std::mt19937 rng(seed);
  std::vector<RequestHandle> handles;
  const double start = now();
  last = start;
  for (int i = 0; i < concurrency; ++i) {
    Request req;
    req.prompt_tokens.resize(prompt_len);
    for (auto& t : req.prompt_tokens) t = static_cast<int32_t>(rng() % model.config().vocab_size);
    req.max_tokens = output_len;
    req.ignore_eos = true;
    auto h = (*engine)->submit(std::move(req));
    if (!h) {
      std::fprintf(stderr, "%s\n", h.error().message().c_str());
      std::exit(1);
    }
    handles.push_back(std::move(*h));
  }
  int64_t tokens = 0;
  double ttft = 0;
  for (auto& h : handles) {
    StreamOutput out = h.wait();
    tokens += static_cast<int64_t>(out.tokens.size());
    ttft += out.metrics.ttft_seconds;
  }
  r.tokens_per_second = static_cast<double>(tokens) / (now() - start);
  r.mean_ttft = ttft / concurrency;
  return r;
}

double mean_step(const Run& r, size_t batch) {
  auto it = r.decode_steps.find(batch);
  return it == r.decode_steps.end() || it->second.second == 0 ? 0 : it->second.first / it->second.second;
}

}  // namespace
}  // namespace sluice::bench

int main(int argc, char** argv) {
  using namespace sluice;
  CLI::App app{"serving_bench: engine throughput under concurrent requests, as ratios to one stream"};
  std::string model_path, preset = "qwen2.5-0.5b", dtype = "q8_0", kv_dtype = "f16";
  int threads = 2, prompt_len = 128, output_len = 128, max_batch_tokens = 512;
  std::vector<int> concurrency = {1, 2, 4, 8, 16, 32};
  app.add_option("-m,--model", model_path, "GGUF model (default: make --preset/--dtype in memory)");
  app.add_option("--preset", preset, "Preset shape of the in-memory model")->capture_default_str();
  app.add_option("--dtype", dtype, "Weight type of the in-memory model: a tensor type (f32, f16, bf16, q8_0, q4_k, ...) or a mix (q4_k_m, ...)")->capture_default_str();
  app.add_option("-t,--threads", threads, "Threads; 0 = one per core")->capture_default_str();
  app.add_option("--prompt", prompt_len, "Prompt tokens per request")->capture_default_str();
  app.add_option("--output", output_len, "Output tokens per request")->capture_default_str();
  app.add_option("--concurrency", concurrency, "Concurrent requests, one run each")->delimiter(',')->capture_default_str();
  app.add_option("--max-batch-tokens", max_batch_tokens, "Token budget per step")->capture_default_str();
  app.add_option("--kv-cache-dtype", kv_dtype, "f16 or f32")->capture_default_str();
  std::string paths;
  app.add_option("--paths", paths, "Kernel paths to measure, e.g. avx2,amx (default: every one this machine runs)");
  CLI11_PARSE(app, argc, argv);

  std::string description;
  LoadedModel m = bench::load_bench_model(model_path, preset, dtype, description);
  model_path = description;
  ThreadPool pool(threads);
  EngineConfig config;
  config.max_batch_tokens = max_batch_tokens;
  config.kv_type = kv_dtype == "f32" ? KvType::kF32 : KvType::kF16;
  const int max_c = *std::max_element(concurrency.begin(), concurrency.end());
  config.kv_cache_bytes = static_cast<int64_t>(KvPool::bytes_per_token(m.model->config(), config.kv_type)) *
                          (max_c * (prompt_len + output_len + 16) + 64);
  std::printf("model: %s, threads: %d, SIMD: %s, KV cache %s, prompt %d, output %d, max-batch-tokens %d\n",
              model_path.c_str(), pool.num_threads(), kernels::simd_target_name(), kv_dtype.c_str(), prompt_len,
              output_len, max_batch_tokens);
  // Each kernel path the machine runs, side by side (kernel_path.h; all give the same bits).
  for (const std::string& why : kernels::unavailable_kernel_paths()) std::printf("kernel path not run: %s\n", why.c_str());
  for (const kernels::KernelPath path : kernels::available_kernel_paths()) {
    if (!bench::path_listed(paths, kernels::kernel_path_name(path))) continue;
    if (!kernels::set_kernel_path(path)) continue;
    std::printf("-- kernel path %s\n", kernels::kernel_path_name(path));
    std::printf("| concurrent | output tok/s | vs 1 stream | decode step | step vs batch 1 | mean TTFT |\n");
    std::printf("|---:|---:|---:|---:|---:|---:|\n");
    double single_tps = 0, single_step = 0;
    for (int c : concurrency) {
      bench::Run r = bench::run(*m.model, *m.tokenizer, pool, config, c, prompt_len, output_len, 1234 + c);
      const double step = bench::mean_step(r, static_cast<size_t>(c));
      if (c == concurrency.front()) single_tps = r.tokens_per_second, single_step = step;
      std::printf("| %d | %.1f | %.2fx | %.1f ms | %.2fx | %.1f ms |\n", c, r.tokens_per_second,
                  r.tokens_per_second / single_tps, step * 1e3, single_step > 0 ? step / single_step : 0.0,
                  r.mean_ttft * 1e3);
      std::fflush(stdout);
    }
  }
  return 0;
}
