// Mutex, MutexLock and CondVar: std::mutex and std::condition_variable with clang's
// thread-safety attributes, so that a clang build with -Wthread-safety (`make check-clang`)
// proves at compile time that every field marked SLUICE_GUARDED_BY(mu) is read and written
// with mu held, and that a function marked SLUICE_REQUIRES(mu) is only called with it held.
// g++ ignores the attributes; the types cost nothing over the std ones.
//
//   Mutex mu_;
//   int count_ SLUICE_GUARDED_BY(mu_) = 0;
//   ...
//   MutexLock lock(mu_);
//   while (count_ == 0) cv_.wait(lock);  // a loop: the analysis sees the condition under the lock
//
// NOTE: CondVar takes no predicate. A lambda is analysed as a function of its own that does
// not hold the caller's lock, so a predicate reading guarded fields would not check; the
// caller's loop does.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define SLUICE_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define SLUICE_THREAD_ANNOTATION(x)
#endif

#define SLUICE_CAPABILITY(name) SLUICE_THREAD_ANNOTATION(capability(name))
#define SLUICE_SCOPED_CAPABILITY SLUICE_THREAD_ANNOTATION(scoped_lockable)
#define SLUICE_GUARDED_BY(mu) SLUICE_THREAD_ANNOTATION(guarded_by(mu))
#define SLUICE_PT_GUARDED_BY(mu) SLUICE_THREAD_ANNOTATION(pt_guarded_by(mu))
#define SLUICE_ACQUIRED_BEFORE(...) SLUICE_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define SLUICE_REQUIRES(...) SLUICE_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define SLUICE_EXCLUDES(...) SLUICE_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define SLUICE_ACQUIRE(...) SLUICE_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define SLUICE_RELEASE(...) SLUICE_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define SLUICE_NO_THREAD_SAFETY_ANALYSIS SLUICE_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace sluice {

class CondVar;
class MutexLock;

class SLUICE_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() SLUICE_ACQUIRE() { mu_.lock(); }
  void unlock() SLUICE_RELEASE() { mu_.unlock(); }

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds a Mutex from construction to destruction.
class SLUICE_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) SLUICE_ACQUIRE(mu) : lock_(mu.mu_) {}
  ~MutexLock() SLUICE_RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  friend class CondVar;
  std::unique_lock<std::mutex> lock_;
};

class CondVar {
 public:
  // Releases the lock's mutex until notified (or woken spuriously), then holds it again.
  void wait(MutexLock& lock) { cv_.wait(lock.lock_); }
  // The same, up to `deadline`; false when it passed.
  bool wait_until(MutexLock& lock, std::chrono::steady_clock::time_point deadline) {
    return cv_.wait_until(lock.lock_, deadline) == std::cv_status::no_timeout;
  }
  void notify_one() noexcept { cv_.notify_one(); }
  void notify_all() noexcept { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace sluice
