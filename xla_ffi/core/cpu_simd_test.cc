// Tests of the SIMD level choice: what the processor has, pinning lower for
// tests, and pins undone.
#include "core/cpu_simd.h"

#include <gtest/gtest.h>

namespace gearjax {
namespace {

TEST(CpuSimd, KernelsUseTheDetectedLevelUnlessPinned) {
  EXPECT_EQ(ActiveSimdLevel(), DetectedSimdLevel());
  {
    const ScopedSimdLevel pin(SimdLevel::kBaseline);
    EXPECT_EQ(ActiveSimdLevel(), SimdLevel::kBaseline);
    {
      const ScopedSimdLevel inner(SimdLevel::kAvx2);  // never above what the CPU has
      EXPECT_EQ(ActiveSimdLevel(), DetectedSimdLevel());
    }
    EXPECT_EQ(ActiveSimdLevel(), SimdLevel::kBaseline);
  }
  EXPECT_EQ(ActiveSimdLevel(), DetectedSimdLevel());
}

TEST(CpuSimd, Avx2KernelsRunWhereTheProcessorHasAvx2) {
#if defined(__x86_64__)
  if (!__builtin_cpu_supports("avx2")) {
    GTEST_SKIP() << "this processor has no AVX2: the kernel tests ran the baseline kernels only";
  }
  EXPECT_EQ(DetectedSimdLevel(), SimdLevel::kAvx2);
#else
  GTEST_SKIP() << "not x86-64: every kernel is the plain C++ one";
#endif
}

}  // namespace
}  // namespace gearjax
