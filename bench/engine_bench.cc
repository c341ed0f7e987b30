// engine_bench: the forward pass against the machine's ceilings, as ratios taken in one run.
//
//   decode step (1 sequence)   bytes read per step (the weights, as the path reads them, and the
//                              keys and values of the context) / the median step time, vs the
//                              read bandwidth probed just before (and the fastest step's)
//   prefill                    matmul rate, vs the kernel path's measured peak (integer types:
//                              its instruction mix, bench/peak_isa.cc; float types: FMA)
//   batched decode (B seqs)    tokens/s of B sequences per step, vs one sequence per step
//
// Usage: engine_bench [-m FILE.gguf | --preset NAME --dtype TYPE] [--threads N] [--ctx N]
//                     [--batch B] [--prefill P] [--steps S] [--kv-dtype f16|f32] [--paths avx2,...]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/peak.h"
#include "bench/bench_model.h"
#include "kernels/kernel_path.h"
#include "kernels/matmul.h"
#include "kernels/packed_weight.h"
#include "kernels/quant_blocks.h"
#include "model/loader.h"
#include "model/model_maker.h"

namespace sluice::bench {
namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// The bytes of the weights one token reads: the lean form's where the path reads it (every x86
// path, on weights repacked at load: packed_weight.h), else the file's.
double weight_bytes_per_token_step(const Model& m, kernels::KernelPath path) {
  const bool lean_path = path != kernels::KernelPath::kGeneric;
  auto bytes = [&](const kernels::WeightView& w) {
    if (lean_path && w.packed != nullptr && w.packed->lean()) return static_cast<double>(w.packed->lean_bytes());
    return static_cast<double>(w.rows) * w.row_bytes();
  };
  double total = bytes(m.weights().output);
  for (const auto& l : m.weights().layers) {
    total += bytes(l.wq) + bytes(l.wk) + bytes(l.wv) + bytes(l.wo) + bytes(l.gate) + bytes(l.up) + bytes(l.down);
  }
  return total;
}

double matmul_params(const Model& m) {
  auto n = [](const kernels::WeightView& w) { return static_cast<double>(w.rows) * w.cols; };
  double total = 0;
  for (const auto& l : m.weights().layers) {
    total += n(l.wq) + n(l.wk) + n(l.wv) + n(l.wo) + n(l.gate) + n(l.up) + n(l.down);
  }
  return total;  // the output projection runs for one token per sequence only
}

// Seconds per decode step: the median step (a step on a shared machine now and then waits for
// another tenant; the median does not move with a few such) and the fastest.
struct StepTimes {
  double median = 0, best = 0;
};

// Runs B sequences: prefill `ctx` tokens each, then `steps` decode steps of one token per
// sequence, each timed.
StepTimes decode_step_seconds(Model& m, ThreadPool& pool, KvType kv_type, int batch, int ctx, int steps) {
  const int32_t bs = 16;
  const int32_t blocks_per_seq = (ctx + steps + bs) / bs;
  KvPool kv(m.config(), blocks_per_seq * batch, bs, kv_type);
  std::vector<float> logits;
  auto seq_blocks = [&](int s) {
    std::vector<int32_t> b(blocks_per_seq);
    std::iota(b.begin(), b.end(), s * blocks_per_seq);
    return b;
  };
  for (int s = 0; s < batch; ++s) {
    ForwardBatch b;
    b.block_size = bs;
    b.max_blocks_per_seq = blocks_per_seq;
    const int32_t row = b.add_sequence(seq_blocks(s));
    for (int p = 0; p < ctx; ++p) b.add_token(row, (p * 7 + s) % m.config().vocab_size, p, p == ctx - 1);
    SLUICE_CHECK(m.forward(b, kv, pool, logits).is_ok());
  }
  std::vector<double> times;
  for (int step = 0; step < steps; ++step) {
    const double t0 = now();
    ForwardBatch b;
    b.block_size = bs;
    b.max_blocks_per_seq = blocks_per_seq;
    for (int s = 0; s < batch; ++s) {
      const int32_t row = b.add_sequence(seq_blocks(s));
      b.add_token(row, (step * 13 + s) % m.config().vocab_size, ctx + step, true);
    }
    SLUICE_CHECK(m.forward(b, kv, pool, logits).is_ok());
    times.push_back(now() - t0);
  }
  std::sort(times.begin(), times.end());
  const size_t n = times.size();
  return {n % 2 == 1 ? times[n / 2] : (times[n / 2 - 1] + times[n / 2]) / 2, times.front()};
}

double prefill_seconds(Model& m, ThreadPool& pool, KvType kv_type, int tokens) {
  const int32_t bs = 16, blocks = (tokens + bs - 1) / bs;
  KvPool kv(m.config(), blocks, bs, kv_type);
  ForwardBatch b;
  b.block_size = bs;
  b.max_blocks_per_seq = blocks;
  std::vector<int32_t> ids(blocks);
  std::iota(ids.begin(), ids.end(), 0);
  const int32_t row = b.add_sequence(ids);
  for (int p = 0; p < tokens; ++p) b.add_token(row, (p * 7) % m.config().vocab_size, p, p == tokens - 1);
  std::vector<float> logits;
  double best = 1e30;
  for (int rep = 0; rep < 2; ++rep) {
    const double t0 = now();
    SLUICE_CHECK(m.forward(b, kv, pool, logits).is_ok());
    best = std::min(best, now() - t0);
  }
  return best;
}

int run(int argc, char** argv) {
  CLI::App app{"engine_bench: forward-pass speed as ratios to this machine's measured ceilings"};
  std::string model_path, preset = "qwen2.5-0.5b", dtype = "q8_0";
  int threads = 0, ctx = 128, batch = 8, prefill = 128, steps = 16;
  app.add_option("-m,--model", model_path, "GGUF model (default: make --preset/--dtype in memory)");
  app.add_option("--preset", preset, "Preset shape of the in-memory model")->capture_default_str();
  app.add_option("--dtype", dtype, "Weight type of the in-memory model: a tensor type (f32, f16, bf16, q8_0, q4_k, ...) or a mix (q4_k_m, ...)")->capture_default_str();
  app.add_option("-t,--threads", threads, "Threads; 0 = one per core")->capture_default_str();
  app.add_option("--ctx", ctx, "Context length before the decode steps")->capture_default_str();
  app.add_option("--batch", batch, "Sequences per step for the batched decode")->capture_default_str();
  app.add_option("--prefill", prefill, "Prompt tokens in the prefill pass")->capture_default_str();
  app.add_option("--steps", steps, "Decode steps timed (the median step is reported)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  std::string paths;
  app.add_option("--paths", paths, "Kernel paths to measure, e.g. avx2,amx (default: every one this machine runs)");
  std::string kv_dtype = "f16";
  app.add_option("--kv-dtype", kv_dtype, "KV cache element type, as sluice serve's --kv-cache-dtype")
      ->check(CLI::IsMember({"f16", "f32"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const KvType kv_type = kv_dtype == "f32" ? KvType::kF32 : KvType::kF16;

  std::string description;
  LoadedModel loaded = load_bench_model(model_path, preset, dtype, description);
  std::unique_ptr<Model> model = std::move(loaded.model);
  model_path = description;
  ThreadPool pool(threads);
  std::printf("model: %s, threads: %d, SIMD: %s\n", model_path.c_str(), pool.num_threads(), kernels::simd_target_name());

  const double bw = measure_read_bandwidth(pool);
  const double peak = measure_peak_flops(pool);
  std::printf("machine: read bandwidth %.1f GB/s, peak FMA %.1f GFLOP/s\n", bw / 1e9, peak / 1e9);

  // A one-sequence step also reads the keys and values of its context, ctx + steps / 2 on average.
  const double kv_bytes = static_cast<double>(KvPool::bytes_per_token(model->config(), kv_type)) * (ctx + steps / 2.0);
  const bool int8 = kernels::is_block_quant(model->weights().layers.at(0).up.type);
  // Each kernel path the machine runs, side by side (kernel_path.h; all give the same bits).
  for (const std::string& why : kernels::unavailable_kernel_paths()) std::printf("kernel path not run: %s\n", why.c_str());
  for (const kernels::KernelPath path : kernels::available_kernel_paths()) {
    if (!path_listed(paths, kernels::kernel_path_name(path))) continue;
    if (!kernels::set_kernel_path(path)) continue;
    std::printf("-- kernel path %s\n", kernels::kernel_path_name(path));
    // Probed again next to the decode it divides: on a shared machine it moves over a run.
    const double path_bw = measure_read_bandwidth(pool);
    const StepTimes one = decode_step_seconds(*model, pool, kv_type, 1, ctx, steps);
    const double single = one.median;
    const double batched = decode_step_seconds(*model, pool, kv_type, batch, ctx, steps).median;
    const double pf = prefill_seconds(*model, pool, kv_type, prefill);
    const double pf_flops = 2.0 * matmul_params(*model) * prefill / pf;
    const double wbytes = weight_bytes_per_token_step(*model, path);
    const double read = wbytes + kv_bytes;
    std::printf("decode, 1 sequence at ctx %d:  %.2f ms/step, %.1f tok/s, weights %.0f MB + %s kv %.0f MB per step -> %.1f GB/s = %.2f of read bandwidth (%.1f GB/s just before; fastest step %.2f)\n",
                ctx, single * 1e3, 1 / single, wbytes / 1e6, kv_dtype.c_str(), kv_bytes / 1e6, read / single / 1e9,
                read / single / path_bw, path_bw / 1e9, read / one.best / path_bw);
    std::printf("decode, %d sequences per step: %.2f ms/step (%.2fx a 1-sequence step), %.1f tok/s = %.2fx one sequence\n",
                batch, batched * 1e3, batched / single, batch / batched, (batch / batched) / (1 / single));
    if (int8) {  // against the path's own integer peak (bench/peak_isa.cc)
      const double peak_mac = measure_peak_path_macs(pool, path);
      std::printf("prefill, %d tokens:            %.1f tok/s, %.1f GMAC/s = %.2f of the path's peak (%.0f GMAC/s)\n",
                  prefill, prefill / pf, pf_flops / 2e9, pf_flops / 2 / peak_mac, peak_mac / 1e9);
    } else {
      std::printf("prefill, %d tokens:            %.1f tok/s, %.1f GFLOP/s = %.2f of peak FMA\n", prefill,
                  prefill / pf, pf_flops / 1e9, pf_flops / peak);
    }
  }
  return 0;
}

}  // namespace
}  // namespace sluice::bench

int main(int argc, char** argv) { return sluice::bench::run(argc, argv); }
