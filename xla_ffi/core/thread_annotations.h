// Lock requirements that the compiler checks: clang's thread safety analysis
// (-Wthread-safety; scripts/check_thread_safety.sh runs it over the core).
// A field says which mutex guards it (GEARJAX_GUARDED_BY), a function which
// mutex its caller must hold (GEARJAX_REQUIRES: the "...Locked" functions);
// holding one means a MutexLock in scope. Every mutex of the core that guards
// state used from more than one function is one: the table's (table/table.h),
// its sample tickets' return list, the table registry's, the exchange
// counters', the deferred errors', the staged updates' pool, the deferred
// releases' queue, the NIXL agent's two and the one-sided plans' with their
// registry. Plain std::mutex is left only where the lock and what it guards
// live in one function (the signal handlers' install, NIXL's loader, the
// keep list of a table that cannot free its memory). Other compilers see no
// attributes: the checks are clang's, the code is the same.
#pragma once

#include <mutex>

#if defined(__clang__) && !defined(__CUDA__)
#define GEARJAX_THREAD_ATTRIBUTE(x) __attribute__((x))
#else
#define GEARJAX_THREAD_ATTRIBUTE(x)
#endif

#define GEARJAX_CAPABILITY(x) GEARJAX_THREAD_ATTRIBUTE(capability(x))
#define GEARJAX_SCOPED_CAPABILITY GEARJAX_THREAD_ATTRIBUTE(scoped_lockable)
#define GEARJAX_GUARDED_BY(x) GEARJAX_THREAD_ATTRIBUTE(guarded_by(x))
#define GEARJAX_REQUIRES(...) GEARJAX_THREAD_ATTRIBUTE(requires_capability(__VA_ARGS__))
#define GEARJAX_ACQUIRE(...) GEARJAX_THREAD_ATTRIBUTE(acquire_capability(__VA_ARGS__))
#define GEARJAX_RELEASE(...) GEARJAX_THREAD_ATTRIBUTE(release_capability(__VA_ARGS__))
#define GEARJAX_EXCLUDES(...) GEARJAX_THREAD_ATTRIBUTE(locks_excluded(__VA_ARGS__))
#define GEARJAX_RETURN_CAPABILITY(x) GEARJAX_THREAD_ATTRIBUTE(lock_returned(x))
#define GEARJAX_NO_THREAD_SAFETY_ANALYSIS GEARJAX_THREAD_ATTRIBUTE(no_thread_safety_analysis)

namespace gearjax {

// A std::mutex the analysis knows as a capability.
class GEARJAX_CAPABILITY("mutex") Mutex {
 public:
  void lock() GEARJAX_ACQUIRE() { mu_.lock(); }
  void unlock() GEARJAX_RELEASE() { mu_.unlock(); }
  // Tells the analysis the caller holds this mutex, where it cannot see it:
  // a condition variable's predicate, which runs with the mutex held.
  void AssertHeld() const GEARJAX_THREAD_ATTRIBUTE(assert_capability(this)) {}
  // For a std::unique_lock that condition variables wait with (MutexLock's).
  std::mutex& native() { return mu_; }

 private:
  std::mutex mu_;
};

// Holds a Mutex for its scope. Unlock() and Relock() let go of it and take it
// back midway. A condition variable waits with native(); the analysis counts
// the mutex as held throughout, as it is whenever the wait returns, and the
// wait's predicate says so with AssertHeld().
class GEARJAX_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) GEARJAX_ACQUIRE(mu) : lock_(mu.native()) {}
  ~MutexLock() GEARJAX_RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() GEARJAX_RELEASE() { lock_.unlock(); }
  void Relock() GEARJAX_ACQUIRE() { lock_.lock(); }
  std::unique_lock<std::mutex>& native() { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace gearjax
