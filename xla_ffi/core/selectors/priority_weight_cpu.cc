// priority ** alpha on the CPU (see priority_weight_cpu.h). The scalar and the
// AVX2 kernel perform the same IEEE operations in the same order, so they
// give the same bits; the build compiles this file with -ffp-contract=off so
// that no multiply-add is fused in one of them and not the other.
#include "core/selectors/priority_weight_cpu.h"

#include <bit>

#include "core/cpu_simd.h"
#include "core/limits.h"

namespace gearjax {
namespace {

constexpr double kLn2Hi = 0x1.62e42fee00000p-1;   // ln 2's leading bits: k * kLn2Hi is exact
constexpr double kLn2Lo = 0x1.a39ef35793c76p-33;  // ln 2 - kLn2Hi
constexpr double kInvLn2 = 0x1.71547652b82fep0;
constexpr double kRound = 0x1.8p52;  // x + kRound - kRound: x rounded to an integer
constexpr uint64_t kMantissa = 0x000fffffffffffffull;
constexpr uint64_t kSqrt2Mantissa = 0x0006a09e667f3bcdull;  // sqrt(2)'s mantissa bits
constexpr uint64_t kOne = 0x3ff0000000000000ull;            // 1.0's bits
// Below this k, 2^k exp(r) < 2^-1022 * sqrt(2) / 2 < kMinWeight.
constexpr double kLowestScale = -1022.0;

// ln m / (2 s) = sum of z^i / (2i + 1) for i = 0..10, z = s^2.
constexpr double kLogSeries[11] = {1.0,      1.0 / 3,  1.0 / 5,  1.0 / 7,  1.0 / 9, 1.0 / 11,
                                   1.0 / 13, 1.0 / 15, 1.0 / 17, 1.0 / 19, 1.0 / 21};
// exp(r) = sum of r^i / i! for i = 0..13.
constexpr double kExpSeries[14] = {1.0,         1.0,          1.0 / 2,       1.0 / 6,
                                   1.0 / 24,    1.0 / 120,    1.0 / 720,     1.0 / 5040,
                                   1.0 / 40320, 1.0 / 362880, 1.0 / 3628800, 1.0 / 39916800,
                                   1.0 / 479001600, 1.0 / 6227020800.0};

// The scalar kernel's arithmetic; the AVX2 kernel's below mirrors it
// operation by operation (the tests check they give the same bits).
double LogPoly(double z) {  // Estrin's order: short dependency chains
  const double* c = kLogSeries;
  const double z2 = z * z, z4 = z2 * z2, z8 = z4 * z4;
  const double b0 = (c[0] + z * c[1]) + z2 * (c[2] + z * c[3]);
  const double b1 = (c[4] + z * c[5]) + z2 * (c[6] + z * c[7]);
  const double b2 = (c[8] + z * c[9]) + z2 * c[10];
  return (b0 + z4 * b1) + z8 * b2;
}

double ExpPoly(double r) {
  const double* c = kExpSeries;
  const double r2 = r * r, r4 = r2 * r2, r8 = r4 * r4;
  const double c0 = ((c[0] + r * c[1]) + r2 * (c[2] + r * c[3])) +
                    r4 * ((c[4] + r * c[5]) + r2 * (c[6] + r * c[7]));
  const double c1 = ((c[8] + r * c[9]) + r2 * (c[10] + r * c[11])) + r4 * (c[12] + r * c[13]);
  return c0 + r8 * c1;
}

double PowScalar(double x, double alpha) {
  const uint64_t bits = std::bit_cast<uint64_t>(x);
  // m in [sqrt(2), 2) becomes m / 2 and e + 1: m then lies in [sqrt(1/2), sqrt(2)).
  const uint64_t high = (bits & kMantissa) > kSqrt2Mantissa ? 1 : 0;
  const uint64_t biased = (bits >> 52) + high;  // e + 1023 (priorities are positive)
  const double e = static_cast<double>(biased) - 1023.0;  // exact, as the vector's
  const double m = std::bit_cast<double>((bits & kMantissa) | (kOne - (high << 52)));
  const double f = m - 1.0;  // exact: m lies within [1/2, 2]
  const double s = f / (2.0 + f);
  const double ln_m = (s + s) * LogPoly(s * s);
  const double ln_x = e * kLn2Hi + (e * kLn2Lo + ln_m);
  const double y = alpha * ln_x;
  const double rounded = y * kInvLn2 + kRound;  // k + kRound: its low bits hold k
  const double kd = rounded - kRound;
  const double r = (y - kd * kLn2Hi) - kd * kLn2Lo;
  const double p = ExpPoly(r);
  // 2^k, from k's low bits.
  const double scale = std::bit_cast<double>((std::bit_cast<uint64_t>(rounded) + 1023) << 52);
  const double w = kd < kLowestScale ? kMinWeight : p * scale;
  return w > kMinWeight ? w : kMinWeight;
}

double WeightScalar(double priority, double alpha) {
  if (alpha == 0.0) return 1.0;
  if (priority == 0.0) return 0.0;
  if (alpha == 1.0) return priority > kMinWeight ? priority : kMinWeight;
  return PowScalar(priority, alpha);
}

void WeightsBaseline(const double* priorities, double alpha, double* weights, int64_t n) {
  for (int64_t i = 0; i < n; ++i) weights[i] = WeightScalar(priorities[i], alpha);
}

#if defined(GEARJAX_HAVE_AVX2_KERNELS)
constexpr double kTwo52 = 0x1p52;  // e + 2^52 has e in its low bits

// LogPoly, ExpPoly and PowScalar's arithmetic, four lanes at a time.
#define GEARJAX_AVX2_INLINE GEARJAX_AVX2 __attribute__((always_inline)) inline
GEARJAX_AVX2_INLINE __m256d Add(__m256d a, __m256d b) { return _mm256_add_pd(a, b); }
GEARJAX_AVX2_INLINE __m256d Mul(__m256d a, __m256d b) { return _mm256_mul_pd(a, b); }
GEARJAX_AVX2_INLINE __m256d Set(double a) { return _mm256_set1_pd(a); }
// c[i] + x * c[i + 1]
GEARJAX_AVX2_INLINE __m256d Pair(const double* c, int i, __m256d x) {
  return Add(Set(c[i]), Mul(x, Set(c[i + 1])));
}

GEARJAX_AVX2_INLINE __m256d LogPoly4(__m256d z) {
  const double* c = kLogSeries;
  const __m256d z2 = Mul(z, z), z4 = Mul(z2, z2), z8 = Mul(z4, z4);
  const __m256d b0 = Add(Pair(c, 0, z), Mul(z2, Pair(c, 2, z)));
  const __m256d b1 = Add(Pair(c, 4, z), Mul(z2, Pair(c, 6, z)));
  const __m256d b2 = Add(Pair(c, 8, z), Mul(z2, Set(c[10])));
  return Add(Add(b0, Mul(z4, b1)), Mul(z8, b2));
}

GEARJAX_AVX2_INLINE __m256d ExpPoly4(__m256d r) {
  const double* c = kExpSeries;
  const __m256d r2 = Mul(r, r), r4 = Mul(r2, r2), r8 = Mul(r4, r4);
  const __m256d c0 = Add(Add(Pair(c, 0, r), Mul(r2, Pair(c, 2, r))),
                         Mul(r4, Add(Pair(c, 4, r), Mul(r2, Pair(c, 6, r)))));
  const __m256d c1 = Add(Add(Pair(c, 8, r), Mul(r2, Pair(c, 10, r))), Mul(r4, Pair(c, 12, r)));
  return Add(c0, Mul(r8, c1));
}

// Four weights as WeightScalar gives them (alpha not 0 or 1).
GEARJAX_AVX2_INLINE __m256d PowFour(__m256d x, __m256d alpha) {
  const __m256i bits = _mm256_castpd_si256(x);
  const __m256i mantissa = _mm256_and_si256(bits, _mm256_set1_epi64x(kMantissa));
  // All ones where the mantissa is above sqrt(2)'s (PowScalar's `high`).
  const __m256i high = _mm256_cmpgt_epi64(mantissa, _mm256_set1_epi64x(kSqrt2Mantissa));
  const __m256i biased = _mm256_sub_epi64(_mm256_srli_epi64(bits, 52), high);
  const __m256d two52 = _mm256_set1_pd(kTwo52);
  const __m256d e = _mm256_sub_pd(
      _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(biased, _mm256_castpd_si256(two52))),
                    two52),
      _mm256_set1_pd(1023.0));
  const __m256i exponent = _mm256_add_epi64(_mm256_set1_epi64x(kOne), _mm256_slli_epi64(high, 52));
  const __m256d m = _mm256_castsi256_pd(_mm256_or_si256(mantissa, exponent));
  const __m256d f = _mm256_sub_pd(m, Set(1.0));
  const __m256d s = _mm256_div_pd(f, Add(Set(2.0), f));
  const __m256d ln_m = Mul(Add(s, s), LogPoly4(Mul(s, s)));
  const __m256d ln_x = Add(Mul(e, Set(kLn2Hi)), Add(Mul(e, Set(kLn2Lo)), ln_m));
  const __m256d y = Mul(alpha, ln_x);
  const __m256d rounded = Add(Mul(y, Set(kInvLn2)), Set(kRound));
  const __m256d kd = _mm256_sub_pd(rounded, Set(kRound));
  const __m256d r = _mm256_sub_pd(_mm256_sub_pd(y, Mul(kd, Set(kLn2Hi))), Mul(kd, Set(kLn2Lo)));
  const __m256d p = ExpPoly4(r);
  const __m256i scale = _mm256_slli_epi64(
      _mm256_add_epi64(_mm256_castpd_si256(rounded), _mm256_set1_epi64x(1023)), 52);
  const __m256d min_weight = _mm256_set1_pd(kMinWeight);
  const __m256d tiny = _mm256_cmp_pd(kd, _mm256_set1_pd(kLowestScale), _CMP_LT_OQ);
  const __m256d w = _mm256_blendv_pd(Mul(p, _mm256_castsi256_pd(scale)), min_weight, tiny);
  // max(w, kMinWeight) as the scalar's w > kMinWeight ? w : kMinWeight.
  const __m256d raised = _mm256_max_pd(w, min_weight);
  // Priority 0 weighs 0.
  const __m256d zero = _mm256_cmp_pd(x, _mm256_setzero_pd(), _CMP_EQ_OQ);
  return _mm256_andnot_pd(zero, raised);
}

GEARJAX_AVX2 void WeightsAvx2(const double* priorities, double alpha, double* weights,
                              int64_t n) {
  const __m256d a = _mm256_set1_pd(alpha);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    _mm256_storeu_pd(weights + i, PowFour(_mm256_loadu_pd(priorities + i), a));
  }
  for (; i < n; ++i) weights[i] = WeightScalar(priorities[i], alpha);
}
#endif

}  // namespace

double PriorityPowCpu(double priority, double alpha) { return PowScalar(priority, alpha); }

void PriorityWeightsCpu(const double* priorities, double alpha, double* weights, int64_t n) {
  if (alpha == 0.0 || alpha == 1.0) return WeightsBaseline(priorities, alpha, weights, n);
#if defined(GEARJAX_HAVE_AVX2_KERNELS)
  if (ActiveSimdLevel() == SimdLevel::kAvx2) return WeightsAvx2(priorities, alpha, weights, n);
#endif
  WeightsBaseline(priorities, alpha, weights, n);
}

}  // namespace gearjax
