// Errors kept for the next call to raise (see deferred_error.h).
#include "core/gpu/deferred_error.h"

#include "core/common.h"

namespace gearjax {

void DeferredError::Defer(const std::string& message) {
  MutexLock lock(mu_);
  if (pending_.load(std::memory_order_relaxed)) {
    ++more_;
    return;
  }
  first_ = message;
  more_ = 0;
  pending_.store(true, std::memory_order_release);
}

void DeferredError::Raise(const std::string& what) {
  if (!pending_.load(std::memory_order_acquire)) return;
  std::string message;
  {
    MutexLock lock(mu_);
    if (!pending_.load(std::memory_order_relaxed)) return;  // raised by another call
    message = what + first_;
    if (more_ > 0) message += " (and " + std::to_string(more_) + " later updates failed too)";
    first_.clear();
    pending_.store(false, std::memory_order_relaxed);
  }
  throw FailedEarlier(message);
}

}  // namespace gearjax
