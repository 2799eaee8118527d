// Ctrl-C for calls that wait. A rate limiter's wait (or a constrained
// sample's) must give way to SIGINT within a moment, but the signal's handler
// runs elsewhere: Python runs it on its main thread between bytecodes, which a
// thread blocked in native code never reaches, and a compiled program's wait
// runs on one of XLA's threads. So the process counts the interrupting
// signals (SIGINT, SIGTERM) itself, in a handler chained in front of the one
// installed (Python's), and a wait polls the count (WaitInterruptibly).
//
// What a wait does when a signal arrived is its thread's hook (ScopedHook):
// the Python bindings' hook runs the Python handlers (on the main thread) and
// gives up where one raised; a thread without a hook, such as XLA's running a
// compiled program, gives up: the program fails, and Python's handler runs
// once the program's caller is back in Python.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

#include "core/common.h"

namespace gearjax::interrupts {

// How often a wait looks at the count: the most a signal waits for a wait.
inline constexpr std::chrono::milliseconds kPoll{50};

// Puts the counting handler in front of the current handlers of SIGINT and
// SIGTERM where those are functions (SIG_DFL ends the process and SIG_IGN
// ignores the signal: nothing to give way to). Python's signal.signal
// replaces it, so every wait calls this first; cheap when already in front.
void Watch();

// The interrupting signals counted so far.
uint64_t Count();

// A thread's answer, without any table lock held, to a signal that arrived
// while it waited: true gives up (the wait throws Interrupted).
using Hook = bool (*)();

// Sets this thread's hook for its lifetime.
class ScopedHook {
 public:
  explicit ScopedHook(Hook hook);
  ~ScopedHook();
  ScopedHook(const ScopedHook&) = delete;
  ScopedHook& operator=(const ScopedHook&) = delete;

 private:
  Hook previous_;
};

// Runs this thread's hook; true (give up) for a thread without one.
bool GivesUp();

// The count a wait compares with, the counting handler put in front first.
// Take it before the wait can be seen (Table::waiting()): a signal sent by
// someone who saw the wait then always counts after it. Taken later, a signal
// sent in between was lost, and the wait ran to its deadline.
inline uint64_t Baseline() {
  Watch();
  return Count();
}

// changed.wait_until(lock, deadline, done), giving way to interrupting
// signals that arrived since `seen` (Baseline): looks at the count every
// kPoll and at once, and when a signal arrived, asks GivesUp with `lock`
// released; throws Interrupted("<what> was interrupted by a signal") where
// it gives up, and otherwise waits on to the same deadline. `done` runs with
// the lock held. Returns done() at the end.
template <typename Clock, typename Duration, typename Predicate>
bool WaitInterruptibly(std::condition_variable& changed, std::unique_lock<std::mutex>& lock,
                       std::chrono::time_point<Clock, Duration> deadline, Predicate done,
                       const std::string& what, uint64_t seen) {
  Watch();  // Python's signal.signal may have put its own in front since
  while (!done()) {
    if (Count() != seen) {
      seen = Count();
      lock.unlock();
      const bool give_up = GivesUp();
      lock.lock();
      if (give_up) throw Interrupted(what + " was interrupted by a signal (Ctrl-C)");
      continue;
    }
    const auto now = Clock::now();
    if (now >= deadline) return false;
    const std::chrono::time_point<Clock, Duration> poll_end = now + kPoll;
    changed.wait_until(lock, deadline < poll_end ? deadline : poll_end);
  }
  return true;
}

}  // namespace gearjax::interrupts
