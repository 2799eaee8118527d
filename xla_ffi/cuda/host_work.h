// What the CUDA sample and update handlers ask of the host, counted: kernel
// launches, copies, host functions on the stream, stream synchronisations and
// scratch allocations. The first GPU run found a sample's cost in this host
// work, not in its kernels (a host function a call stalled the stream);
// tests/test_gpu.py holds each path to its counts, so none grows unseen.
// Relaxed atomic increments: a few nanoseconds a call.
#pragma once

#include <atomic>
#include <cstdint>

namespace gearjax {

enum class HostWork : int { kLaunch = 0, kCopy, kHostFunction, kSync, kScratch, kNumKinds };

inline std::atomic<int64_t> host_work_counts[static_cast<int>(HostWork::kNumKinds)];

inline void Count(HostWork what, int64_t n = 1) {
  host_work_counts[static_cast<int>(what)].fetch_add(n, std::memory_order_relaxed);
}

inline int64_t HostWorkCount(HostWork what) {
  return host_work_counts[static_cast<int>(what)].load(std::memory_order_relaxed);
}

}  // namespace gearjax
