#include "common/thread_pool.h"

#include <pthread.h>

#include <algorithm>
#include <csignal>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SLUICE_CPU_RELAX() _mm_pause()
#else
#define SLUICE_CPU_RELAX() std::this_thread::yield()
#endif

namespace sluice {
namespace {
// Longer than the gap between two kernels of a step, shorter than a step: a pause takes 30 ns on
// the Zen 5 development VM (20,000: 0.6 ms, measured), less on some CPUs, so the bound is loose.
constexpr int kSpinIterations = 20000;
}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Workers take no asynchronous signal (they inherit the mask they are started with): a Ctrl-C
  // goes to a thread that can hold it off, as gguf::Writer does while it names a written file.
  sigset_t async, before;
  sigemptyset(&async);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM}) sigaddset(&async, s);
  pthread_sigmask(SIG_BLOCK, &async, &before);
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
}

ThreadPool::~ThreadPool() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks(Job& job) {
  for (;;) {
    const int64_t begin = job.next.fetch_add(job.chunk);
    if (begin >= job.n) return;
    const int64_t end = std::min(job.n, begin + job.chunk);
    (*job.fn)(begin, end);
    if (job.done.fetch_add(end - begin) + (end - begin) == job.n) {
      MutexLock lock(mu_);  // pairs with the caller's wait on done_cv_
      done_cv_.notify_one();
    }
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    bool got = false;
    for (int i = 0; i < kSpinIterations && !got; ++i) {
      got = generation_.load() != seen;
      if (!got) SLUICE_CPU_RELAX();
    }
    if (!got) {
      MutexLock lock(mu_);
      while (!stop_ && generation_.load() == seen) work_cv_.wait(lock);
      if (stop_) return;
    }
    seen = generation_.load();
    // NOTE: in_job_ is raised before job_ is read. The caller clears job_ and then waits for
    // in_job_ to drop to zero, so a worker either sees null or is waited for (seq_cst order).
    in_job_.fetch_add(1);
    if (Job* job = job_.load()) run_chunks(*job);
    in_job_.fetch_sub(1);
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
  Job job{&fn, n, std::max(grain, (n + chunks - 1) / chunks)};
  job_.store(&job);
  {
    MutexLock lock(mu_);  // so a worker between its check and its wait cannot miss this
    generation_.fetch_add(1);
  }
  work_cv_.notify_all();
  run_chunks(job);
  // Ranges claimed by workers may still be running.
  for (int i = 0; i < kSpinIterations && job.done.load() != n; ++i) SLUICE_CPU_RELAX();
  if (job.done.load() != n) {
    MutexLock lock(mu_);
    while (job.done.load() != n) done_cv_.wait(lock);
  }
  job_.store(nullptr);
  while (in_job_.load() != 0) std::this_thread::yield();
}

}  // namespace sluice
