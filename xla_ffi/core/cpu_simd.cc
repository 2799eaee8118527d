// CPU vector extension detection (see cpu_simd.h).
#include "core/cpu_simd.h"

#include <algorithm>
#include <atomic>

namespace gearjax {
namespace {

// -1: not pinned; otherwise the pinned SimdLevel.
std::atomic<int> pinned{-1};

SimdLevel Detect() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt")) {
    return SimdLevel::kAvx2;
  }
#endif
  return SimdLevel::kBaseline;
}

}  // namespace

SimdLevel DetectedSimdLevel() {
  static const SimdLevel detected = Detect();
  return detected;
}

SimdLevel ActiveSimdLevel() {
  const int level = pinned.load(std::memory_order_relaxed);
  return level < 0 ? DetectedSimdLevel() : static_cast<SimdLevel>(level);
}

ScopedSimdLevel::ScopedSimdLevel(SimdLevel level)
    : previous_(pinned.exchange(
          std::min(static_cast<int>(level), static_cast<int>(DetectedSimdLevel())))) {}

ScopedSimdLevel::~ScopedSimdLevel() { pinned.store(previous_); }

}  // namespace gearjax
