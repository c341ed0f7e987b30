#include "common/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SLUICE_CPU_RELAX() _mm_pause()
#else
#define SLUICE_CPU_RELAX() std::this_thread::yield()
#endif

namespace sluice {
namespace {
// About 20-50 microseconds of spinning: longer than the gap between two kernels of a step,
// much shorter than the gap between steps.
constexpr int kSpinIterations = 20000;
}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks() {
  for (;;) {
    int64_t begin = next_.fetch_add(chunk_, std::memory_order_relaxed);
    if (begin >= n_) return;
    (*fn_)(begin, std::min(n_, begin + chunk_));
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    bool got = false;
    for (int i = 0; i < kSpinIterations; ++i) {
      if (generation_.load(std::memory_order_acquire) != seen) {
        got = true;
        break;
      }
      SLUICE_CPU_RELAX();
    }
    if (!got) {
      std::unique_lock lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || generation_.load(std::memory_order_acquire) != seen; });
      if (stop_) return;
    }
    seen = generation_.load(std::memory_order_acquire);
    run_chunks();
    if (busy_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard lock(mu_);  // pairs with the caller's wait on done_cv_
      done_cv_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (workers_.empty() || n <= grain) {
    fn(0, n);
    return;
  }
  // A few chunks per thread balances uneven work without much claiming overhead.
  const int64_t chunks = static_cast<int64_t>(num_threads()) * 4;
  fn_ = &fn;
  n_ = n;
  chunk_ = std::max(grain, (n + chunks - 1) / chunks);
  next_.store(0, std::memory_order_relaxed);
  busy_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  {
    std::lock_guard lock(mu_);  // so a worker between its check and its wait cannot miss this
    generation_.fetch_add(1, std::memory_order_release);
  }
  work_cv_.notify_all();
  run_chunks();
  for (int i = 0; i < kSpinIterations && busy_.load(std::memory_order_acquire) != 0; ++i) SLUICE_CPU_RELAX();
  if (busy_.load(std::memory_order_acquire) != 0) {
    std::unique_lock lock(mu_);
    done_cv_.wait(lock, [&] { return busy_.load(std::memory_order_acquire) == 0; });
  }
  fn_ = nullptr;
}

}  // namespace sluice
