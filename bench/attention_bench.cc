// attention_bench: decode attention over the paged KV cache alone, against the machine's read
// bandwidth, as ratios taken in one run.
//
// A decode step of B sequences at context C reads every layer's keys and values of B x C
// positions once: B x C x layers x 2 x kv_dim elements. For each context length this times
// paged_attention over all the layers of a model shape (each layer its own cache, so nothing
// stays in the caches from one layer to the next, as in a forward pass whose weights stream
// through them in between) and prints those bytes per second against the measured bandwidth.
//
// Usage: attention_bench [--preset qwen3-0.6b] [--ctx 128,1024,4096] [--batch 1] [--kv-dtype f16|f32]
//                        [--threads N] [--seconds S]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/peak.h"
#include "kernels/attention.h"
#include "model/kv_pool.h"
#include "model/model_maker.h"

namespace sluice::bench {
namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

int run(int argc, char** argv) {
  CLI::App app{"attention_bench: decode attention over the paged KV cache against the read bandwidth"};
  std::string preset = "qwen3-0.6b", kv_dtype = "f16";
  std::vector<int> contexts = {128, 512, 1024, 4096};
  int batch = 1, threads = 0;
  double seconds = 0.5;
  app.add_option("--preset", preset, "Model shape: heads, kv heads, head size, layers (a preset of `sluice model make`)")
      ->capture_default_str();
  app.add_option("--ctx", contexts, "Context lengths (keys each sequence attends to)")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--batch", batch, "Sequences per step, one token each")->check(CLI::Range(1, 256))->capture_default_str();
  app.add_option("--kv-dtype", kv_dtype, "KV cache element type, as sluice serve's --kv-cache-dtype")
      ->check(CLI::IsMember({"f16", "f32"}))
      ->capture_default_str();
  app.add_option("-t,--threads", threads, "Threads; 0 = one per core")->check(CLI::Range(0, 1024))->capture_default_str();
  app.add_option("--seconds", seconds, "Time per context length (best step of repeated runs)")
      ->check(CLI::Range(0.01, 60.0))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const Result<ModelSpec> spec = preset_spec(preset);
  if (!spec) return std::fprintf(stderr, "%s\n", spec.error().message().c_str()), 2;

  const kernels::KvType type = kv_dtype == "f32" ? kernels::KvType::kF32 : kernels::KvType::kF16;
  kernels::AttentionShape shape;
  shape.num_heads = spec->num_heads;
  shape.num_kv_heads = spec->num_kv_heads;
  shape.head_dim = spec->head_dim > 0 ? spec->head_dim : spec->dim / spec->num_heads;
  shape.scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  const int64_t kv_dim = int64_t{shape.num_kv_heads} * shape.head_dim;
  const int64_t q_dim = int64_t{shape.num_heads} * shape.head_dim;
  const size_t elem = kernels::kv_type_size(type);
  const int layers = spec->num_layers;

  ThreadPool pool(threads);
  const double bw = measure_read_bandwidth(pool);
  std::printf("shape: %s (%d layers, %d heads, %d kv heads of %d), kv %s, %d sequence(s), threads: %d, read bandwidth %.1f GB/s\n",
              preset.c_str(), layers, shape.num_heads, shape.num_kv_heads, shape.head_dim, kv_dtype.c_str(), batch,
              pool.num_threads(), bw / 1e9);
  std::printf("%8s %12s %12s %10s %8s\n", "ctx", "kv MB/step", "ms/step", "GB/s", "of bw");
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  CacheEvictor evict;
  for (const int ctx : contexts) {
    constexpr int32_t kBlock = 16;
    const int32_t blocks_per_seq = (ctx + kBlock - 1) / kBlock;
    const int64_t slots = int64_t{blocks_per_seq} * kBlock * batch;
    // Random keys and values in a KvPool, as the engine keeps them (f16 rows from random floats).
    ModelConfig config;
    config.num_layers = layers;
    config.num_kv_heads = shape.num_kv_heads;
    config.head_dim = shape.head_dim;
    KvPool pool_kv(config, static_cast<int32_t>(slots / kBlock), kBlock, type);
    std::vector<float> row(kv_dim);
    for (int l = 0; l < layers; ++l) {
      for (int64_t s = 0; s < slots; ++s) {
        for (float& x : row) x = normal(rng);
        kernels::store_kv_token(type, shape, kBlock, pool_kv.num_blocks(), s, row.data(), pool_kv.k(l));
        for (float& x : row) x = normal(rng);
        kernels::store_kv_token(type, shape, kBlock, pool_kv.num_blocks(), s, row.data(), pool_kv.v(l));
      }
    }
    // Sequence s holds blocks s, s + batch, s + 2 batch, ...: interleaved, as a busy pool leaves them.
    std::vector<int32_t> table(int64_t{batch} * blocks_per_seq), positions(batch), seq_idx(batch);
    for (int s = 0; s < batch; ++s) {
      for (int b = 0; b < blocks_per_seq; ++b) table[int64_t{s} * blocks_per_seq + b] = b * batch + s;
      positions[s] = ctx - 1;
      seq_idx[s] = s;
    }
    std::vector<float> q(batch * q_dim), out(batch * q_dim);
    for (float& x : q) x = normal(rng);
    kernels::AttentionBatch ab;
    ab.q = q.data();
    ab.positions = positions.data();
    ab.seq_idx = seq_idx.data();
    ab.block_table = table.data();
    ab.max_blocks_per_seq = blocks_per_seq;
    ab.num_tokens = batch;
    auto step = [&] {
      for (int l = 0; l < layers; ++l) {
        const kernels::PagedKv kv{pool_kv.k(l), pool_kv.v(l), kBlock, pool_kv.num_blocks(), type};
        kernels::paged_attention(pool, shape, ab, kv, out.data());
      }
    };
    step();  // warm-up
    double best = 1e30;
    const double end = now() + seconds;
    int reps = 0;
    do {
      evict();  // a forward pass streams its weights through the caches between two layers' attention
      const double t0 = now();
      step();
      best = std::min(best, now() - t0);
      ++reps;
    } while (now() < end || reps < 3);
    const double bytes = 2.0 * layers * batch * ctx * kv_dim * elem;
    std::printf("%8d %12.1f %12.3f %10.1f %8.2f\n", ctx, bytes / 1e6, best * 1e3, bytes / best / 1e9, bytes / best / bw);
  }
  return 0;
}

}  // namespace
}  // namespace sluice::bench

int main(int argc, char** argv) { return sluice::bench::run(argc, argv); }
