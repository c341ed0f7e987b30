// ThreadPool: a fixed set of worker threads that run data-parallel loops.
//
// parallel_for(n, fn) splits [0, n) into contiguous ranges and calls fn(begin, end) on the
// workers and the calling thread, returning when all ranges are done. How a range is split
// never changes what is computed for an index: kernels give each output element to exactly
// one range and reduce inside it in a fixed order (DESIGN.md, invariant 1).
//
// A forward pass calls parallel_for a few hundred times per step, so hand-offs are cheap:
// idle workers spin briefly on an atomic generation counter before sleeping on a condition
// variable. Ranges are claimed from a shared counter and the caller takes ranges too, so it
// never waits for a worker that has not started (one descheduled by a busy machine): it waits
// only for ranges already claimed, then for workers that are between claiming and leaving.
//
// Thread-safety: parallel_for may be called from one thread at a time (the engine thread).
// The destructor stops and joins the workers.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "common/mutex.h"

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
  // One parallel_for call; lives on the caller's stack.
  struct Job {
    const std::function<void(int64_t, int64_t)>* fn;
    int64_t n;
    int64_t chunk;
    std::atomic<int64_t> next{0};  // first unclaimed index
    std::atomic<int64_t> done{0};  // indices completed
  };

  void worker_loop();
  void run_chunks(Job& job);

  std::vector<std::thread> workers_;
  Mutex mu_;
  CondVar work_cv_;
  CondVar done_cv_;
  std::atomic<Job*> job_{nullptr};       // the current job, null between calls
  std::atomic<uint64_t> generation_{0};  // bumped for each job
  std::atomic<int> in_job_{0};           // workers that may be looking at job_
  bool stop_ SLUICE_GUARDED_BY(mu_) = false;
};

}  // namespace sluice
