// ThreadPool: a fixed set of worker threads that run data-parallel loops.
//
// parallel_for(n, fn) splits [0, n) into contiguous ranges and calls fn(begin, end) on the
// workers and the calling thread, returning when all ranges are done. How a range is split
// never changes what is computed for an index: kernels give each output element to exactly
// one range and reduce inside it in a fixed order (DESIGN.md, invariant 1).
//
// Thread-safety: parallel_for may be called from one thread at a time (the engine thread).
// The destructor stops and joins the workers.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace sluice {

class ThreadPool {
 public:
  // num_threads counts the calling thread: 1 means no workers. 0 picks the hardware count.
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over ranges covering [0, n); each range has at least `grain` items
  // (except perhaps the last).
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);

 private:
  void worker_loop();
  void run_chunks();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  // The current job; written under mu_ before generation_ is bumped.
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;  // GUARDED_BY(mu_) for writes
  int64_t n_ = 0;
  int64_t chunk_ = 1;
  std::atomic<int64_t> next_{0};
  uint64_t generation_ = 0;  // GUARDED_BY(mu_)
  int busy_ = 0;             // GUARDED_BY(mu_): workers still in the current job
  bool stop_ = false;        // GUARDED_BY(mu_)
};

}  // namespace sluice
