// Machine ceilings that benchmark figures are divided by: memory read bandwidth and the
// peak fused-multiply-add rate of the SIMD target the kernels dispatch to.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "kernels/kernel_path.h"

namespace sluice::bench {

// Bytes per second read from a buffer much larger than the caches, all threads of the pool.
double measure_read_bandwidth(ThreadPool& pool);
// Floating-point operations per second (an FMA counts 2) of independent FMA chains, all threads.
double measure_peak_flops(ThreadPool& pool);
// Int8 multiply-accumulates per second of the Q8_0 kernel's inner loop (broadcast, sign, maddubs,
// madd, add) on data in L1, all threads; 0 where the SIMD target has no such instructions.
double measure_peak_int8_macs(ThreadPool& pool);

// The peak multiply-accumulate rate of an instruction path's integer kernel (peak_isa.cc): the
// vnni kernels' inner loop for avxvnni/avx512, tdpbssd for amx with dot products of amx_k bytes
// (64, the instruction's most; 32, the kernel's), measure_peak_int8_macs for avx2. 0 for a path
// the machine cannot run.
double measure_peak_path_macs(ThreadPool& pool, kernels::KernelPath path, int amx_k = 64);

// Reads a buffer far larger than the last-level cache, so that the next timed run finds none
// of its data in the caches, as a decode step finds each layer's weights and cached keys (the
// rest of the step went through the caches in between).
class CacheEvictor {
 public:
  explicit CacheEvictor(size_t bytes = size_t{256} << 20) : buf_(bytes, 1) {}
  void operator()();

 private:
  std::vector<uint8_t> buf_;
  uint8_t sink_ = 0;
};

// Whether a kernel path is one of a comma-separated list ("avx2,amx"); an empty list holds all.
inline bool path_listed(const std::string& csv, const std::string& name) {
  if (csv.empty()) return true;
  size_t begin = 0;
  while (begin <= csv.size()) {
    const size_t end = std::min(csv.find(',', begin), csv.size());
    if (csv.compare(begin, end - begin, name) == 0) return true;
    begin = end + 1;
  }
  return false;
}

// Best of 3 of the operations per second of `ops(part)` run once per thread, all at once.
double best_parallel_rate(ThreadPool& pool, const std::function<double(int64_t)>& ops);

}  // namespace sluice::bench
