#include "kernels/kernel_path.h"

#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace sluice::kernels {
namespace {

struct Probe {
  bool avx2 = false;
  bool avx512 = false, avxvnni = false;
  bool amx = false;
  std::string amx_why;  // why not, when !amx
};

#if defined(__x86_64__)
uint64_t xgetbv0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t{hi} << 32) | lo;
}
#endif

Probe probe() {
  Probe p;
#if defined(__x86_64__)
  __builtin_cpu_init();
  p.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  unsigned a = 0, b = 0, c = 0, d = 0;
  const bool leaf7 = __get_cpuid_count(7, 0, &a, &b, &c, &d);
  const bool tile = leaf7 && (d >> 24 & 1), int8 = leaf7 && (d >> 25 & 1);
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl");
  // The vnni paths' kernels use AVX2 and F16C too (the decoders), and the avx512 one AVX512DQ.
  p.avx512 = p.avx2 && avx512 && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
  unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  p.avxvnni = p.avx2 && __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1) && (a1 >> 4 & 1);  // CPUID.(7,1):EAX[4]
  if (!tile || !int8) {
    p.amx_why = "the CPU has no AMX-INT8";
  } else if (!avx512 || !p.avx2) {
    p.amx_why = "the CPU has AMX but not AVX-512 BW/VL, which its kernel's epilogue uses";
  } else {
    // Linux hands out the tile data state only on request (ARCH_REQ_XCOMP_PERM = 0x1023,
    // XFEATURE_XTILEDATA = 18); a kernel without AMX support or a VM may refuse it.
    const long rc = syscall(SYS_arch_prctl, 0x1023, 18);
    if (rc != 0) {
      p.amx_why = "the OS refused the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM)";
    } else if ((xgetbv0() & (uint64_t{3} << 17)) != (uint64_t{3} << 17)) {
      p.amx_why = "the OS does not enable the AMX tile state (XCR0)";
    } else {
      p.amx = true;
    }
  }
#else
  p.amx_why = "not an x86-64 machine";
#endif
  return p;
}

const Probe& machine() {
  static const Probe p = probe();
  return p;
}

std::atomic<int> g_path{-1};

KernelPath best() {
  const Probe& p = machine();
  if (p.amx) return KernelPath::kAmx;
  if (p.avx512) return KernelPath::kAvx512;
  if (p.avxvnni) return KernelPath::kAvxVnni;
  return p.avx2 ? KernelPath::kAvx2 : KernelPath::kGeneric;
}

constexpr KernelPath kAllPaths[] = {KernelPath::kGeneric, KernelPath::kAvx2, KernelPath::kAvxVnni,
                                    KernelPath::kAvx512, KernelPath::kAmx};

}  // namespace

bool kernel_path_runs(KernelPath path) {
  const Probe& p = machine();
  switch (path) {
    case KernelPath::kGeneric: return !p.avx2;
    case KernelPath::kAvx2: return p.avx2;
    case KernelPath::kAvxVnni: return p.avxvnni;
    case KernelPath::kAvx512: return p.avx512;
    case KernelPath::kAmx: return p.amx;
  }
  return false;
}

const char* kernel_path_name(KernelPath path) {
  switch (path) {
    case KernelPath::kGeneric: return "generic";
    case KernelPath::kAvx2: return "avx2";
    case KernelPath::kAvxVnni: return "avxvnni";
    case KernelPath::kAvx512: return "avx512";
    case KernelPath::kAmx: return "amx";
  }
  return "?";
}

std::vector<KernelPath> available_kernel_paths() {
  std::vector<KernelPath> out;
  for (KernelPath p : kAllPaths) {
    if (kernel_path_runs(p)) out.push_back(p);
  }
  return out;
}

std::vector<std::string> unavailable_kernel_paths() {
  std::vector<std::string> out;
  if (!machine().avx2) out.push_back(fmt::format("avx2: {}", "the CPU has no AVX2/FMA/F16C"));
  if (!machine().avxvnni) out.push_back(fmt::format("avxvnni: {}", "the CPU has no AVX-VNNI"));
  if (!machine().avx512) out.push_back(fmt::format("avx512: {}", "the CPU has no AVX-512 F/BW/VL/DQ with VNNI"));
  if (!machine().amx) out.push_back(fmt::format("amx: {}", machine().amx_why));
  return out;
}

Result<KernelPath> parse_kernel_path(const std::string& name) {
  std::string lower = name;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (KernelPath p : kAllPaths) {
    if (p != KernelPath::kGeneric && lower == kernel_path_name(p)) return p;
  }
  return Error("unknown kernel path '{}' (choose avx2, avxvnni, avx512 or amx)", name);
}

namespace {
// Ok, or why this machine cannot run `path`.
Status runnable(KernelPath path) {
  if (kernel_path_runs(path)) return Status::ok();
  for (const std::string& why : unavailable_kernel_paths()) {
    if (why.starts_with(kernel_path_name(path)))
      return Status::error(fmt::format("this machine cannot run kernel path {}", why));
  }
  return Status::error(fmt::format("this machine cannot run kernel path {}", kernel_path_name(path)));
}
}  // namespace

Status set_kernel_path(KernelPath path) {
  if (Status s = runnable(path); !s) return s;
  g_path.store(static_cast<int>(path));
  return Status::ok();
}

namespace {

const char* set_env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// SLUICE_KERNELS's path, none when unset.
Result<std::optional<KernelPath>> forced_path() {
  const char* env = set_env("SLUICE_KERNELS");
  if (env == nullptr) return std::optional<KernelPath>();
  auto p = parse_kernel_path(env);
  const Status s = p ? runnable(*p) : Status::error(p.error().message());
  if (!s) return Error("SLUICE_KERNELS={}: {}", env, s.message());
  return std::optional<KernelPath>(*p);
}

enum class Repack { kOff, kAuto, kOn, kLean };

Result<Repack> parse_repack() {
  const char* env = set_env("SLUICE_REPACK");
  if (env == nullptr) return Repack::kAuto;
  const std::string v = env;
  if (v == "auto") return Repack::kAuto;
  if (v == "on") return Repack::kOn;
  if (v == "off") return Repack::kOff;
  if (v == "lean") return Repack::kLean;
  return Error("SLUICE_REPACK={}: expected auto, on, lean or off", v);
}

// What a library caller that skipped check_kernel_environment gets: the message, and exit 2.
[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "sluice: %s\n", message.c_str());
  std::exit(2);
}

}  // namespace

Status check_kernel_environment() {
  if (auto p = forced_path(); !p) return Status::error(p.error().message());
  if (auto r = parse_repack(); !r) return Status::error(r.error().message());
  return Status::ok();
}

KernelPath active_kernel_path() {
  int v = g_path.load(std::memory_order_relaxed);
  if (v >= 0) return static_cast<KernelPath>(v);
  static std::once_flag once;
  std::call_once(once, [] {
    KernelPath chosen = best();
    auto forced = forced_path();
    if (!forced) die(forced.error().message());
    if (forced->has_value()) chosen = **forced;
    int expected = -1;
    g_path.compare_exchange_strong(expected, static_cast<int>(chosen));
  });
  return static_cast<KernelPath>(g_path.load());
}

namespace {
Repack repack_mode() {
  static const Repack mode = [] {
    auto r = parse_repack();
    if (!r) die(r.error().message());
    return *r;
  }();
  return mode;
}
}  // namespace

bool repack_weights() {
  const KernelPath p = active_kernel_path();
  return repack_mode() != Repack::kOff && p != KernelPath::kGeneric;
}

bool repack_within_budget() { return repack_mode() == Repack::kAuto || repack_mode() == Repack::kLean; }
bool repack_tile_form() { return repack_mode() != Repack::kLean && active_kernel_path() == KernelPath::kAmx; }

std::string describe_kernel_paths() {
  std::string out = fmt::format("kernels: {}", kernel_path_name(active_kernel_path()));
  std::string others;
  for (KernelPath p : available_kernel_paths()) {
    if (p != active_kernel_path()) others += fmt::format("{}{}", others.empty() ? "" : ", ", kernel_path_name(p));
  }
  if (!others.empty()) out += fmt::format(" (also available: {})", others);
  for (const std::string& why : unavailable_kernel_paths()) out += fmt::format("; no {}", why);
  return out;
}

}  // namespace sluice::kernels
