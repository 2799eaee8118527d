// An error that could not fail the call that caused it, kept for the next
// call to raise: a priority update applied by a GPU stream callback
// (staged_update.h) changes nothing on bad input and keeps its message here.
// The first such error is raised once, with how many more came after it. Both
// sides take only a small mutex of their own (the callback must never wait
// behind the table's), and a check with nothing kept takes no lock at all.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "core/thread_annotations.h"

namespace gearjax {

class DeferredError {
 public:
  // Keeps `message` unless an error is kept already (then counts one more).
  void Defer(const std::string& message);
  // Throws InvalidArgument with the kept error (prefixed by `what`) and
  // forgets it; does nothing when none is kept. Of several threads raising
  // at once, one throws.
  void Raise(const std::string& what);
  bool pending() const { return pending_.load(std::memory_order_acquire); }

 private:
  Mutex mu_;
  std::string first_ GEARJAX_GUARDED_BY(mu_);
  int64_t more_ GEARJAX_GUARDED_BY(mu_) = 0;
  std::atomic<bool> pending_{false};
};

}  // namespace gearjax
