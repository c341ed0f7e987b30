// matmul_bench: the matmul kernels alone, against this machine's measured ceilings, as ratios
// taken in one run.
//
// For each weight shape of a model (a preset of `sluice model make`: Qwen2.5-0.5B's by default;
// qwen3-0.6b has rows of 1024, which the 256-element K-quant blocks hold) and each token count, the
// multiply-accumulates per second of kernels::matmul on a weight evicted from the caches before
// each call (as a forward pass finds it), divided by:
//   - the rate of a reference loop of the kernel's own instructions on data in L1 (Q8_0: a
//     broadcast, sign, multiply-add, widen and add per 32 products; float types: FMA chains), and
//   - for one token, the memory read bandwidth (bytes of the weight read per second: the lean
//     form's on the paths that read it, packed_weight.h, else the file's).
//
// Usage: matmul_bench [--dtype q8_0|q4_k|...|f16|f32|bf16] [--preset qwen3-0.6b] [--tokens 1,4,16] [--threads N]
//                     [--seconds S]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/peak.h"
#include "kernels/packed_weight.h"
#include "common/half.h"
#include "kernels/kernel_path.h"
#include "kernels/matmul.h"
#include "kernels/quant_blocks.h"
#include "kernels/quantize.h"
#include "model/model_maker.h"

namespace sluice::bench {
namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Shape {
  std::string name;
  int64_t rows, cols;
};

// The distinct matrix shapes of a preset's layers, and its output matrix.
std::vector<Shape> preset_shapes(const ModelSpec& m) {
  const int64_t head_dim = m.head_dim > 0 ? m.head_dim : m.dim / m.num_heads;
  const auto shape = [](const char* what, int64_t rows, int64_t cols) {
    return Shape{std::string(what) + " " + std::to_string(rows) + "x" + std::to_string(cols), rows, cols};
  };
  std::vector<Shape> shapes = {shape("attn_q", m.num_heads * head_dim, m.dim)};
  if (m.num_heads * head_dim != m.dim) shapes.push_back(shape("attn_output", m.dim, m.num_heads * head_dim));
  shapes.push_back(shape("attn_k", m.num_kv_heads * head_dim, m.dim));
  shapes.push_back(shape("ffn_up", m.ffn_dim, m.dim));
  shapes.push_back(shape("ffn_down", m.dim, m.ffn_dim));
  shapes.push_back(shape("output", m.vocab_size, m.dim));
  return shapes;
}

// Random weights of a type in ggml's layout.
std::vector<uint8_t> make_weights(gguf::TensorType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  kernels::WeightView probe{nullptr, type, rows, cols};
  std::vector<uint8_t> data(probe.row_bytes() * rows);
  std::uniform_int_distribution<int> byte(-127, 127);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  if (type != gguf::TensorType::kQ8_0 && kernels::is_block_quant(type)) {
    std::vector<float> row(cols);
    for (int64_t r = 0; r < rows; ++r) {
      for (float& v : row) v = normal(rng);
      kernels::quantize_row(type, row.data(), cols, data.data() + r * probe.row_bytes());
    }
    return data;
  }
  switch (type) {
    case gguf::TensorType::kQ8_0:
      for (size_t off = 0; off < data.size(); off += sizeof(gguf::BlockQ8_0)) {
        const uint16_t d = f32_to_f16(0.001f + std::abs(normal(rng)) * 0.01f);
        std::memcpy(&data[off], &d, 2);
        for (int j = 0; j < gguf::kQ8_0BlockSize; ++j) data[off + 2 + j] = static_cast<uint8_t>(byte(rng));
      }
      break;
    case gguf::TensorType::kF32:
      for (size_t off = 0; off < data.size(); off += 4) { float v = normal(rng); std::memcpy(&data[off], &v, 4); }
      break;
    case gguf::TensorType::kF16:
      for (size_t off = 0; off < data.size(); off += 2) { uint16_t v = f32_to_f16(normal(rng)); std::memcpy(&data[off], &v, 2); }
      break;
    case gguf::TensorType::kBF16:
      for (size_t off = 0; off < data.size(); off += 2) { uint16_t v = f32_to_bf16(normal(rng)); std::memcpy(&data[off], &v, 2); }
      break;
    default: break;
  }
  return data;
}

int run(int argc, char** argv) {
  CLI::App app{"matmul_bench: matmul kernels against this machine's measured ceilings"};
  std::string dtype = "q8_0";
  std::vector<int> tokens = {1, 2, 4, 8, 16, 32, 64};
  int threads = 0;
  double seconds = 0.3;
  app.add_option("--dtype", dtype, "Weight type: f32, f16, bf16 or any quantized type (q8_0, q4_k, ...)")
      ->capture_default_str();
  app.add_option("--tokens", tokens, "Token counts (rows of activations), each 1 to 4096")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("-t,--threads", threads, "Threads; 0 = one per core")->check(CLI::Range(0, 1024))->capture_default_str();
  app.add_option("--seconds", seconds, "Time per measurement (best of repeated runs)")
      ->check(CLI::Range(0.001, 60.0))
      ->capture_default_str();
  std::string preset = "qwen2.5-0.5b";
  app.add_option("--preset", preset, "Model shape whose matrices to measure (a preset of `sluice model make`)")
      ->capture_default_str();
  std::string paths;
  app.add_option("--paths", paths, "Kernel paths to measure, e.g. avx2,amx (default: every one this machine runs)");
  CLI11_PARSE(app, argc, argv);

  const auto parsed = gguf::tensor_type_from_name(dtype);
  if (!parsed || !kernels::weight_type_supported(*parsed)) {
    return std::fprintf(stderr, "unknown --dtype '%s' (f32, f16, bf16, q8_0, q4_0, q4_k, q6_k, ...)\n", dtype.c_str()), 2;
  }
  const gguf::TensorType type = *parsed;
  const Result<ModelSpec> spec = preset_spec(preset);
  if (!spec) return std::fprintf(stderr, "%s\n", spec.error().message().c_str()), 2;
  const std::vector<Shape> shapes = preset_shapes(*spec);

  ThreadPool pool(threads);
  const double bw = measure_read_bandwidth(pool);
  const bool int8 = kernels::is_block_quant(type);
  const double fma_mac = int8 ? 0 : measure_peak_flops(pool) / 2;
  std::printf("threads: %d, SIMD: %s, read bandwidth %.1f GB/s\n", pool.num_threads(), kernels::simd_target_name(),
              bw / 1e9);

  // Each kernel path the machine runs, side by side (kernel_path.h; all give the same bits).
  for (const std::string& why : kernels::unavailable_kernel_paths()) std::printf("kernel path not run: %s\n", why.c_str());
  for (const kernels::KernelPath path : kernels::available_kernel_paths()) {
    if (!path_listed(paths, kernels::kernel_path_name(path))) continue;
    if (!kernels::set_kernel_path(path)) continue;
    // The path's own ceiling: its integer kernel's instruction mix (bench/peak_isa.cc), or FMAs.
    const double peak_mac = int8 ? measure_peak_path_macs(pool, path) : fma_mac;
    std::printf("-- kernel path %s: %s %.1f GMAC/s\n", kernels::kernel_path_name(path),
                !int8 ? "f32 FMA peak" : path == kernels::KernelPath::kAmx ? "tdpbssd peak" : "inner-loop peak",
                peak_mac / 1e9);
    std::mt19937 rng(1);
    CacheEvictor evict;
    std::printf("%-20s", "shape \\ tokens");
    for (int t : tokens) std::printf(" %11d", t);
    std::printf("\n");
    for (const Shape& s : shapes) {
      if (s.cols % kernels::block_elements(type) != 0 && int8) {
        std::printf("%-20s %s cannot hold rows of %lld\n", s.name.c_str(), dtype.c_str(), static_cast<long long>(s.cols));
        continue;
      }
      const auto data = make_weights(type, s.rows, s.cols, rng);
      kernels::WeightView w{data.data(), type, s.rows, s.cols};
      // Repacked as a model load repacks it for this path (kernels/packed_weight.h).
      std::unique_ptr<kernels::PackedWeight> packed;
      if (kernels::repack_weights() && kernels::PackedWeight::packs(type)) {
        packed = kernels::PackedWeight::pack(w, pool, {.tiles = kernels::repack_tile_form(), .lean = true});
        w.packed = packed.get();
      }
      // One token reads the lean form where the path repacked one, else the file's blocks.
      const bool lean = packed != nullptr && packed->lean();
      const double one_token_bytes = static_cast<double>(lean ? packed->lean_bytes() : data.size());
      std::printf("%-20s", s.name.c_str());
      double one_token_of_bandwidth = -1;
      for (int t : tokens) {
        std::vector<float> x(static_cast<size_t>(t) * s.cols), y(static_cast<size_t>(t) * s.rows);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        for (float& v : x) v = normal(rng);
        kernels::matmul(pool, w, x.data(), t, y.data());  // warm-up
        double best = 1e30;
        const double end = now() + seconds;
        int reps = 0;
        do {
          evict();  // the weight comes from memory, as in a forward pass
          const double t0 = now();
          kernels::matmul(pool, w, x.data(), t, y.data());
          best = std::min(best, now() - t0);
          ++reps;
        } while (now() < end || reps < 3);
        const double macs = static_cast<double>(s.rows) * s.cols * t / best;
        std::printf(" %5.1f %4.2fc", macs / 1e9, macs / peak_mac);
        if (t == 1) one_token_of_bandwidth = one_token_bytes / best / bw;
      }
      if (one_token_of_bandwidth >= 0) std::printf("   1 token: %.2f of bandwidth", one_token_of_bandwidth);
      std::printf("\n");
    }
  }
  std::printf("(GMAC/s, then c: the fraction of the path's peak)\n");
  return 0;
}

}  // namespace
}  // namespace sluice::bench

int main(int argc, char** argv) { return sluice::bench::run(argc, argv); }
