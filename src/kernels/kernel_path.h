// The dispatch layer of the integer (quantized-weight) kernels: which instruction path they run
// on, chosen once at start from what the CPU and the OS allow.
//
//   amx     Intel AMX-INT8 tiles (Sapphire Rapids and later) for several tokens at once; Linux must
//           grant the tile state (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)), which a
//           VM can refuse. 1-7 tokens run the avx512 code (a tile of 16 token rows would be
//           mostly padding).
//   avx512  512-bit AVX-512 VNNI (vpdpbusd: 64 byte products into 16 int32 lanes), 16 rows a
//           vector (Intel Ice Lake and later, AMD Zen 4 and later). Kernels of its own on the
//           weights' lean form repacked at load (packed_weight.h, matmul_lean.h), else chunks
//           decoded at run time (one token: avx2's direct path).
//   avxvnni the 256-bit VEX form of vpdpbusd (AVX-VNNI: Intel Alder Lake and later, where
//           AVX-512 is absent). The avx512 lean kernels on pairs of 256-bit vectors (weights
//           repacked at load); else chunks decoded at run time, 8 rows a vector (one token:
//           avx2's direct path).
//   avx2    256-bit integer dot products (vpmaddubsw + vpmaddwd), the baseline of x86-64-v3: the
//           lean kernels on the weights repacked at load, else the file's blocks (Highway code).
//   generic Highway's portable code for CPUs without AVX2.
//
// Every path computes the same exact integer block sums and the same float operations per
// (row, token) in the same order, so all of them give bit-identical results (the kernel tests
// compare them with memcmp). SLUICE_KERNELS=avx2|avxvnni|avx512|amx forces a path (for comparisons and tests);
// a path the machine cannot run is an error, not a silent fallback.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace sluice::kernels {

enum class KernelPath { kGeneric, kAvx2, kAvxVnni, kAvx512, kAmx };

const char* kernel_path_name(KernelPath path);

// The paths this machine can run, best last; and for each one it cannot, why.
std::vector<KernelPath> available_kernel_paths();
std::vector<std::string> unavailable_kernel_paths();
bool kernel_path_runs(KernelPath path);

// The path in use: SLUICE_KERNELS when set (an unknown or unavailable value aborts with a
// message at the first kernel call: set_kernel_path reports it as an error instead), else the
// best available.
KernelPath active_kernel_path();

// SLUICE_KERNELS and SLUICE_REPACK as set: an error naming the variable and what is wrong (an
// unknown value, a path this machine cannot run), for a command to report before any work
// rather than abort at its first kernel call.
Status check_kernel_environment();

// Switches the path (tests, benchmarks). Errors for a path the machine cannot run.
Status set_kernel_path(KernelPath path);
Result<KernelPath> parse_kernel_path(const std::string& name);  // any case: "avx512", "AVX512"

// Whether models repack their quantized weights at load (packed_weight.h): on every x86 path
// (amx, avx512, avxvnni, avx2), unless SLUICE_REPACK=off. The avx512, avxvnni and avx2 paths keep
// the lean form only (about the file's size); the amx path also the tile form, for 8 tokens and
// more.
// SLUICE_REPACK=auto (the default) keeps the copies within half the memory available at load
// (the lean form first; the tile form, bigger, only if it fits too); on repacks whatever it
// takes; lean keeps the lean form only. An unknown value aborts with a message, as SLUICE_KERNELS
// does. Off, those paths decode each chunk at run time: the same bits, slower, no extra memory.
bool repack_weights();
bool repack_within_budget();  // auto and lean (true) or on (false)
bool repack_tile_form();      // the amx path, unless SLUICE_REPACK=lean

// One line for the logs: "kernels: amx (avx2 available; avx512-vnni: ...)".
std::string describe_kernel_paths();

}  // namespace sluice::kernels
