// Tests of priority ** alpha on the CPU: its accuracy against long double
// pow over the whole admitted range, the contract's special cases, the same
// bits from the scalar and the AVX2 kernel (and from PriorityWeight, one at a
// time), whatever a batch's length and alignment, and with subnormal numbers
// flushed to zero.
#include "core/selectors/priority_weight_cpu.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <bit>
#include <random>
#include <vector>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "core/cpu_simd.h"
#include "core/limits.h"
#include "core/selectors/priority_weight.h"

namespace gearjax {
namespace {

const double kAlphas[] = {0.6, 0.5, 0.7, 1.0 / 3, 0.9, 0.01, 1e-9, 2.0, 3.7, kMaxAlpha};

uint64_t Bits(double v) { return std::bit_cast<uint64_t>(v); }

// Priorities spread log-uniformly over [kMinPriority, kMaxPriority], their
// low mantissa bits random (exp of a double leaves ln p within an ulp of a
// double, which would hide the rounding of ln p), then the typical range
// [0.1, 2], then hard cases: powers of two, both sides of sqrt(2) (where the
// reduction switches), 1, and the bounds.
std::vector<double> Priorities(int n) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> log_p(std::log(kMinPriority), std::log(kMaxPriority));
  std::uniform_real_distribution<double> typical(0.1, 2.0);
  std::vector<double> p;
  for (int i = 0; i < n; ++i) {
    const double v = std::bit_cast<double>(Bits(std::exp(log_p(rng))) ^ (rng() & 0xfffff));
    p.push_back(std::min(std::max(v, kMinPriority), kMaxPriority));
  }
  for (int i = 0; i < n; ++i) p.push_back(typical(rng));
  for (int e = -1022; e <= 99; e += 7) p.push_back(std::ldexp(1.0, e));
  const double root2 = std::sqrt(2.0);
  for (double v : {root2, std::nextafter(root2, 0.0), std::nextafter(root2, 2.0), 1.0,
                   std::nextafter(1.0, 0.0), std::nextafter(1.0, 2.0), kMinPriority,
                   kMaxPriority, 0.5, 2.0}) {
    p.push_back(v);
  }
  return p;
}

double Exact(double priority, double alpha) {
  const long double w =
      std::pow(static_cast<long double>(priority), static_cast<long double>(alpha));
  return w > kMinWeight ? static_cast<double>(w) : kMinWeight;
}

void ExpectWithinBound(double p, double alpha) {
  const double exact = Exact(p, alpha);
  const double relative = std::fabs(PriorityPowCpu(p, alpha) - exact) / exact;
  const double bound = std::fabs(alpha * std::log(p)) < 10 ? 3e-15 : 2e-13;
  ASSERT_LE(relative, bound) << "priority " << p << " alpha " << alpha;
}

TEST(PriorityPowCpu, IsWithinItsStatedErrorOfTheExactPower) {
  for (double alpha : kAlphas) {
    for (double p : Priorities(20000)) ASSERT_NO_FATAL_FAILURE(ExpectWithinBound(p, alpha));
  }
  // Found by a review: |alpha * ln p| in the hundreds, with ln p's rounding
  // at its largest (each above 1e-13).
  ExpectWithinBound(0x1.48757a55120d1p-772, 1.2343214532999796);
  ExpectWithinBound(0x1.6e0c88530ee59p-243, 3.7);
  ExpectWithinBound(2.6009239917763013e+28, 7.911928484718118);
}

TEST(PriorityPowCpu, KeepsExactCases) {
  for (double alpha : kAlphas) EXPECT_EQ(PriorityPowCpu(1.0, alpha), 1.0) << alpha;
  // The bottom of the range is raised to kMinWeight, the top stays finite.
  EXPECT_EQ(PriorityPowCpu(kMinPriority, kMaxAlpha), kMinWeight);
  EXPECT_EQ(PriorityPowCpu(1e-300, 2.0), kMinWeight);
  EXPECT_TRUE(std::isfinite(PriorityPowCpu(kMaxPriority, kMaxAlpha)));
  EXPECT_GT(PriorityPowCpu(kMaxPriority, kMaxAlpha), 1e239);
}

TEST(PriorityWeightsCpu, GivesPriorityWeightsBitsAtEveryLevelAndLength) {
  std::vector<double> p = Priorities(500);
  for (size_t i = 0; i < p.size(); i += 11) p[i] = 0.0;  // zero weighs 0 unless alpha is 0
  for (double alpha : {0.6, 0.0, 1.0, kMaxAlpha, 0.01}) {
    std::vector<double> expected(p.size());
    for (size_t i = 0; i < p.size(); ++i) expected[i] = PriorityWeight(p[i], alpha);
    for (SimdLevel level : {SimdLevel::kBaseline, SimdLevel::kAvx2}) {
      ScopedSimdLevel pin(level);
      // Every length up to 9 from every offset up to 4 (the vector kernel's
      // tail and its unaligned loads), then the whole batch.
      for (size_t offset = 0; offset < 4; ++offset) {
        for (size_t n = 0; n <= 9; ++n) {
          std::vector<double> w(n, -1.0);
          PriorityWeightsCpu(p.data() + offset, alpha, w.data(), static_cast<int64_t>(n));
          for (size_t i = 0; i < n; ++i) {
            ASSERT_EQ(Bits(w[i]), Bits(expected[offset + i]))
                << "alpha " << alpha << " level " << static_cast<int>(level) << " n " << n;
          }
        }
      }
      std::vector<double> w(p);  // in place
      PriorityWeightsCpu(w.data(), alpha, w.data(), static_cast<int64_t>(w.size()));
      for (size_t i = 0; i < p.size(); ++i) {
        ASSERT_EQ(Bits(w[i]), Bits(expected[i]))
            << "priority " << p[i] << " alpha " << alpha << " level " << static_cast<int>(level);
      }
    }
  }
}

#if defined(__x86_64__)
TEST(PriorityWeightsCpu, GivesTheSameBitsWhereSubnormalNumbersAreFlushed) {
  // XLA's threads run with FTZ and DAZ set (flush subnormal results and
  // inputs to zero); a weight computed there must equal one computed on a
  // Python thread, at the clamp to kMinWeight too.
  const std::vector<double> p = Priorities(2000);
  for (double alpha : {0.6, 0.01, 3.7, kMaxAlpha}) {
    for (SimdLevel level : {SimdLevel::kBaseline, SimdLevel::kAvx2}) {
      ScopedSimdLevel pin(level);
      std::vector<double> plain(p.size()), flushed(p.size());
      PriorityWeightsCpu(p.data(), alpha, plain.data(), static_cast<int64_t>(p.size()));
      const unsigned csr = _mm_getcsr();
      _mm_setcsr(csr | 0x8040);  // FTZ | DAZ
      PriorityWeightsCpu(p.data(), alpha, flushed.data(), static_cast<int64_t>(p.size()));
      _mm_setcsr(csr);
      for (size_t i = 0; i < p.size(); ++i) {
        ASSERT_EQ(Bits(flushed[i]), Bits(plain[i]))
            << "priority " << p[i] << " alpha " << alpha << " level " << static_cast<int>(level);
      }
    }
  }
}
#endif

TEST(PriorityWeightsCpu, FollowsTheContract) {
  const double p[] = {0.0, 7.0, kMinPriority, 1e-300};
  double w[4];
  PriorityWeightsCpu(p, 0.0, w, 4);  // alpha 0 is uniform, priority 0 included
  for (double v : w) EXPECT_EQ(v, 1.0);
  PriorityWeightsCpu(p, 1.0, w, 4);
  EXPECT_EQ(w[0], 0.0);
  EXPECT_EQ(w[1], 7.0);
  EXPECT_EQ(w[2], kMinWeight);
  PriorityWeightsCpu(p, 2.0, w, 4);
  EXPECT_EQ(w[0], 0.0);  // priority 0 is never drawn otherwise
  EXPECT_NEAR(w[1], 49.0, 49.0 * 4 * DBL_EPSILON);
  EXPECT_EQ(w[2], kMinWeight);
  EXPECT_EQ(w[3], kMinWeight);
}

}  // namespace
}  // namespace gearjax
