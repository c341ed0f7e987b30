// The probes of the instruction paths' peaks (kernel_path.h), compiled with target attributes:
// each runs only where kernel_path_runs() says the machine (and, for AMX, the OS) allows it.
//
//   avxvnni / avx512  the vnni kernels' inner loop (matmul_vnni-inl.h) on data in L1: per step a
//                     weight vector, one vpdpbusd of it by bytes of 1 (the level sums), then for
//                     each of 8 tokens a broadcast of its 4 bytes and a vpdpbusd. Counted: the
//                     tokens' multiply-accumulates (4 per int32 lane).
//   amx               tdpbssd on tiles already loaded: 4 independent 16x16 products of 16x64 by
//                     64x16 bytes (16,384 each), and the same with K = 32 (the kernel's products:
//                     one sub-block of 32 weights), which on this hardware take as long.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "bench/peak.h"
#include "kernels/matmul_amx.h"

namespace sluice::bench {
namespace {

#define SLUICE_PEAK_VNNI512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
#define SLUICE_PEAK_VNNI256 __attribute__((target("avxvnni,avx2")))
#define SLUICE_PEAK_AMX __attribute__((target("amx-tile,amx-int8,avx512f")))

SLUICE_PEAK_VNNI512 double vnni512_chains(int64_t iters, int32_t seed) {
  alignas(64) int8_t w[8][64];
  alignas(64) uint8_t x[8][32];
  for (int j = 0; j < 8; ++j) {
    for (int k = 0; k < 64; ++k) w[j][k] = static_cast<int8_t>((seed + 31 * j + 7 * k) % 255 - 127);
    for (int k = 0; k < 32; ++k) x[j][k] = static_cast<uint8_t>((seed + 17 * j + 5 * k) % 255);
  }
  const __m512i ones = _mm512_set1_epi32(0x01010101);
  __m512i acc[8], ws = _mm512_setzero_si512();
  for (int t = 0; t < 8; ++t) acc[t] = _mm512_setzero_si512();
  for (int64_t i = 0; i < iters; ++i) {
    asm volatile("" ::: "memory");  // w and x "change": loads and products stay in the loop
    for (int j = 0; j < 8; ++j) {
      const __m512i wv = _mm512_load_si512(w[j]);
      ws = _mm512_dpbusd_epi32(ws, ones, wv);
      for (int t = 0; t < 8; ++t) {
        int32_t x4;
        std::memcpy(&x4, &x[t][4 * j], 4);
        acc[t] = _mm512_dpbusd_epi32(acc[t], _mm512_set1_epi32(x4), wv);
      }
    }
  }
  __m512i s = ws;
  for (int t = 0; t < 8; ++t) s = _mm512_add_epi32(s, acc[t]);
  alignas(64) int32_t lanes[16];
  _mm512_store_si512(lanes, s);
  volatile int sink = lanes[0];
  (void)sink;
  return static_cast<double>(iters) * 8 * 8 * 64;
}

SLUICE_PEAK_VNNI256 double vnni256_chains(int64_t iters, int32_t seed) {
  alignas(32) int8_t w[8][32];
  alignas(32) uint8_t x[8][32];
  for (int j = 0; j < 8; ++j) {
    for (int k = 0; k < 32; ++k) {
      w[j][k] = static_cast<int8_t>((seed + 31 * j + 7 * k) % 255 - 127);
      x[j][k] = static_cast<uint8_t>((seed + 17 * j + 5 * k) % 255);
    }
  }
  const __m256i ones = _mm256_set1_epi32(0x01010101);
  __m256i acc[8], ws = _mm256_setzero_si256();
  for (int t = 0; t < 8; ++t) acc[t] = _mm256_setzero_si256();
  for (int64_t i = 0; i < iters; ++i) {
    asm volatile("" ::: "memory");
    for (int j = 0; j < 8; ++j) {
      const __m256i wv = _mm256_load_si256(reinterpret_cast<const __m256i*>(w[j]));
      ws = _mm256_dpbusd_avx_epi32(ws, ones, wv);
      for (int t = 0; t < 8; ++t) {
        int32_t x4;
        std::memcpy(&x4, &x[t][4 * j], 4);
        acc[t] = _mm256_dpbusd_avx_epi32(acc[t], _mm256_set1_epi32(x4), wv);
      }
    }
  }
  __m256i s = ws;
  for (int t = 0; t < 8; ++t) s = _mm256_add_epi32(s, acc[t]);
  volatile int sink = _mm256_extract_epi32(s, 0);
  (void)sink;
  return static_cast<double>(iters) * 8 * 8 * 32;
}

// k: bytes of each dot product (64 or 32).
SLUICE_PEAK_AMX double amx_chains(int64_t iters, int32_t seed, int k) {
  kernels::AmxTileConfig cfg;
  for (int t = 0; t < 4; ++t) {  // C
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  for (int t = 4; t < 6; ++t) {  // A: 16 rows of k bytes
    cfg.rows[t] = 16;
    cfg.colsb[t] = static_cast<uint16_t>(k);
  }
  for (int t = 6; t < 8; ++t) {  // B: k / 4 rows of 64 bytes
    cfg.rows[t] = static_cast<uint8_t>(k / 4);
    cfg.colsb[t] = 64;
  }
  _tile_loadconfig(&cfg);
  alignas(64) int8_t buf[16][64];
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 64; ++c) buf[r][c] = static_cast<int8_t>((seed + 13 * r + 7 * c) % 255 - 127);
  }
  _tile_loadd(4, buf, 64);
  _tile_loadd(5, buf, 64);
  _tile_loadd(6, buf, 64);
  _tile_loadd(7, buf, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t i = 0; i < iters; ++i) {
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 4, 7);
    _tile_dpbssd(2, 5, 6);
    _tile_dpbssd(3, 5, 7);
  }
  alignas(64) int32_t out[16][16];
  _tile_stored(0, out, 64);
  volatile int32_t sink = out[3][5];
  (void)sink;
  _tile_release();
  return static_cast<double>(iters) * 4 * 16 * 16 * k;
}

}  // namespace

double measure_peak_path_macs(ThreadPool& pool, kernels::KernelPath path, int amx_k) {
  using kernels::KernelPath;
  if (!kernels::kernel_path_runs(path)) return 0;
  switch (path) {
    case KernelPath::kAvxVnni:
      return best_parallel_rate(pool, [](int64_t part) { return vnni256_chains(1'500'000, static_cast<int32_t>(part)); });
    case KernelPath::kAvx512:
      return best_parallel_rate(pool, [](int64_t part) { return vnni512_chains(1'000'000, static_cast<int32_t>(part)); });
    case KernelPath::kAmx:
      return best_parallel_rate(
          pool, [amx_k](int64_t part) { return amx_chains(2'000'000, static_cast<int32_t>(part), amx_k); });
    default: return measure_peak_int8_macs(pool);
  }
}

}  // namespace sluice::bench
