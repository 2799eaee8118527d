// The fork count and its pthread_atfork handler (see forks.h).
#include "core/forks.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>

namespace gearjax::forks {
namespace {

constexpr uint64_t kRemembered = 64;  // pids of the last generations, for messages

std::atomic<uint64_t> generation{0};
std::atomic<int64_t> pids[kRemembered];

void InChild() {
  const uint64_t next = generation.load(std::memory_order_relaxed) + 1;
  pids[next % kRemembered].store(getpid(), std::memory_order_relaxed);
  generation.store(next, std::memory_order_release);
}

// Registered when the library loads; nothing else runs at a fork.
[[maybe_unused]] const bool installed = [] {
  pids[0].store(getpid(), std::memory_order_relaxed);
  return pthread_atfork(nullptr, nullptr, &InChild) == 0;
}();

}  // namespace

uint64_t Generation() { return generation.load(std::memory_order_acquire); }

int64_t PidOfGeneration(uint64_t g) {
  if (Generation() - g >= kRemembered) return -1;
  return pids[g % kRemembered].load(std::memory_order_relaxed);
}

std::string ForkedCopyMessage(const std::string& table, uint64_t g) {
  const int64_t parent = PidOfGeneration(g);
  return table + " was made by process " +
         (parent >= 0 ? std::to_string(parent) : std::string("(an ancestor)")) +
         ", and this process (" + std::to_string(getpid()) +
         ") is a fork of it: a forked child cannot use an inherited table (its locks may be "
         "held by threads the fork did not copy; its inserts would go to a copy the parent "
         "never sees). Make tables in the child, or load a checkpoint there (Table.load); "
         "dropping the inherited one is fine";
}

}  // namespace gearjax::forks
