// The interrupting signals' count and its handler (see interrupts.h).
#include "core/interrupts.h"

#include <signal.h>

#include <atomic>
#include <cerrno>
#include <deque>
#include <mutex>

namespace gearjax::interrupts {
namespace {

std::atomic<uint64_t> count{0};

constexpr int kSignals[] = {SIGINT, SIGTERM};

// The action each signal had before ours, one of `records`: a record is
// made per (re)install and never freed, so the handler may read one whatever
// Watch does meanwhile.
std::atomic<const struct sigaction*> chained[2] = {nullptr, nullptr};
std::deque<struct sigaction>* const records = new std::deque<struct sigaction>();

int IndexOf(int sig) { return sig == SIGINT ? 0 : 1; }

void OnSignal(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  count.fetch_add(1, std::memory_order_relaxed);
  const struct sigaction* previous = chained[IndexOf(sig)].load(std::memory_order_acquire);
  if (previous != nullptr) {
    if (previous->sa_flags & SA_SIGINFO) {
      previous->sa_sigaction(sig, info, context);
    } else if (previous->sa_handler != SIG_DFL && previous->sa_handler != SIG_IGN) {
      previous->sa_handler(sig);
    }
  }
  errno = saved_errno;
}

bool IsOurs(const struct sigaction& action) {
  return (action.sa_flags & SA_SIGINFO) && action.sa_sigaction == &OnSignal;
}

bool IsFunction(const struct sigaction& action) {
  return (action.sa_flags & SA_SIGINFO) ||
         (action.sa_handler != SIG_DFL && action.sa_handler != SIG_IGN);
}

std::mutex install_mu;
thread_local Hook hook = nullptr;

}  // namespace

void Watch() {
  for (const int sig : kSignals) {
    struct sigaction current;
    if (sigaction(sig, nullptr, &current) != 0 || IsOurs(current) || !IsFunction(current)) {
      continue;
    }
    std::lock_guard<std::mutex> lock(install_mu);
    if (sigaction(sig, nullptr, &current) != 0 || IsOurs(current) || !IsFunction(current)) {
      continue;  // another thread installed it meanwhile
    }
    records->push_back(current);  // a deque: earlier records stay where they are
    chained[IndexOf(sig)].store(&records->back(), std::memory_order_release);
    struct sigaction ours = current;  // the same mask and flags (Python's: no SA_RESTART)
    ours.sa_flags = (current.sa_flags | SA_SIGINFO) & ~SA_RESETHAND;
    ours.sa_sigaction = &OnSignal;
    sigaction(sig, &ours, nullptr);
  }
}

uint64_t Count() { return count.load(std::memory_order_relaxed); }

ScopedHook::ScopedHook(Hook h) : previous_(hook) { hook = h; }
ScopedHook::~ScopedHook() { hook = previous_; }

bool GivesUp() { return hook == nullptr || hook(); }

}  // namespace gearjax::interrupts
