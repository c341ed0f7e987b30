// Machine ceilings that benchmark figures are divided by: memory read bandwidth and the
// peak fused-multiply-add rate of the SIMD target the kernels dispatch to.
#pragma once

#include "common/thread_pool.h"

namespace sluice::bench {

// Bytes per second read from a buffer much larger than the caches, all threads of the pool.
double measure_read_bandwidth(ThreadPool& pool);
// Floating-point operations per second (an FMA counts 2) of independent FMA chains, all threads.
double measure_peak_flops(ThreadPool& pool);
// Int8 multiply-accumulates per second of the Q8_0 kernel's inner loop (broadcast, sign, maddubs,
// madd, add) on data in L1, all threads; 0 where the SIMD target has no such instructions.
double measure_peak_int8_macs(ThreadPool& pool);

}  // namespace sluice::bench
