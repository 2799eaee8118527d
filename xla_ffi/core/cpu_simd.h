// Which x86 vector extensions the CPU kernels of the core use: AVX2 where the
// processor has it, the x86-64 baseline (SSE2) otherwise, and plain C++ on
// other architectures. Every kernel gives the same results bit for bit at
// every level (each kernel's test checks that), so the level changes speed
// only. Tests pin a level with ScopedSimdLevel to run each kernel in turn.
#pragma once

// The kernels' AVX2 halves: built where the compiler can target AVX2 (x86-64
// with GCC or clang), each function marked GEARJAX_AVX2, and run only where
// DetectedSimdLevel found AVX2 and POPCNT (the ISA the mark lets them use).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define GEARJAX_HAVE_AVX2_KERNELS 1
#define GEARJAX_AVX2 __attribute__((target("avx2,popcnt")))
#endif

namespace gearjax {

enum class SimdLevel { kBaseline = 0, kAvx2 = 1 };

// What this processor supports (checked once).
SimdLevel DetectedSimdLevel();

// What the kernels use now: the detected level unless a ScopedSimdLevel
// lowers it.
SimdLevel ActiveSimdLevel();

// For tests: the kernels use min(level, detected) while this lives. Not for
// concurrent use with other pins.
class ScopedSimdLevel {
 public:
  explicit ScopedSimdLevel(SimdLevel level);
  ~ScopedSimdLevel();
  ScopedSimdLevel(const ScopedSimdLevel&) = delete;
  ScopedSimdLevel& operator=(const ScopedSimdLevel&) = delete;

 private:
  int previous_;
};

}  // namespace gearjax
