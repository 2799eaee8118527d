// SumTree::DrawMany, the CPU's batched descent (see sum_tree.h), with one
// child kernel per SIMD level (cpu_simd.h). Every kernel computes the same
// prefix sums in the same order as SumTreeChild, compares them the same way
// and takes the same weight off the target, so a draw gives the very leaf
// SumTreeDraw gives (the code GPU kernels run) at every level; hand-written
// because the compiler keeps the scalar version scalar, and a batch of draws
// is instruction-bound once its cache misses overlap.
#include <cstdint>
#include <vector>

#include "core/cpu_simd.h"
#include "core/prefetch.h"
#include "core/selectors/sum_tree.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace gearjax {
namespace {

constexpr int64_t kFanout = kSumTreeFanout;

// The rare case of every child's prefix <= target (rounding): the last
// positive child, as SumTreeChild takes it.
inline int LastPositiveChild(const double* line, const double* prefix, double t,
                             double* target) {
  int chosen = -1;
  for (int c = 0; c < kFanout; ++c) chosen = line[c] > 0.0 ? c : chosen;
  if (chosen > 0) *target = t - prefix[chosen - 1];
  return chosen;
}

#if defined(__SSE2__)
// Two children per instruction.
inline int ChildSse2(const double* line, double* target) {
  const double t = *target;
  const __m128d zero = _mm_setzero_pd();
  // (x, y) + (0, x) = (x, x + y): each pair's first child and the pair's sum.
  const __m128d v0 = _mm_loadu_pd(line), v1 = _mm_loadu_pd(line + 2);
  const __m128d v2 = _mm_loadu_pd(line + 4), v3 = _mm_loadu_pd(line + 6);
  const __m128d p01 = _mm_add_pd(v0, _mm_unpacklo_pd(zero, v0));   // (l0, s01)
  const __m128d w1 = _mm_add_pd(v1, _mm_unpacklo_pd(zero, v1));    // (l2, s23)
  const __m128d w2 = _mm_add_pd(v2, _mm_unpacklo_pd(zero, v2));    // (l4, s45)
  const __m128d w3 = _mm_add_pd(v3, _mm_unpacklo_pd(zero, v3));    // (l6, s67)
  const __m128d p23 = _mm_add_pd(_mm_unpackhi_pd(p01, p01), w1);   // (s01 + l2, s03)
  const __m128d s03 = _mm_unpackhi_pd(p23, p23);
  const __m128d p45 = _mm_add_pd(s03, w2);                         // (s03 + l4, s03 + s45)
  const __m128d s47 = _mm_add_sd(_mm_unpackhi_pd(w2, w2), _mm_unpackhi_pd(w3, w3));
  const __m128d p67 = _mm_add_pd(_mm_unpackhi_pd(p45, s03),        // (p5 + l6, s03 + s47)
                                 _mm_unpacklo_pd(w3, s47));
  const __m128d tv = _mm_set1_pd(t);
  const __m128d m01 = _mm_cmple_pd(p01, tv), m23 = _mm_cmple_pd(p23, tv);
  const __m128d m45 = _mm_cmple_pd(p45, tv), m67 = _mm_cmple_pd(p67, tv);
  // Each true comparison is an all-ones lane, -1 as an integer: the lanes'
  // sum is minus the count (no popcount instruction in baseline x86-64).
  const __m128i sums = _mm_add_epi64(
      _mm_add_epi64(_mm_castpd_si128(m01), _mm_castpd_si128(m23)),
      _mm_add_epi64(_mm_castpd_si128(m45), _mm_castpd_si128(m67)));
  const int count = static_cast<int>(
      -_mm_cvtsi128_si64(_mm_add_epi64(sums, _mm_unpackhi_epi64(sums, sums))));
  if (count == kFanout) {
    alignas(16) double prefix[kFanout];
    _mm_store_pd(prefix, p01);
    _mm_store_pd(prefix + 2, p23);
    _mm_store_pd(prefix + 4, p45);
    _mm_store_pd(prefix + 6, p67);
    return LastPositiveChild(line, prefix, t, target);
  }
  // The largest of prefixes 0..6 that is <= t, which is the last such one
  // SumTreeChild takes: prefixes 0..6 never decrease (each adds a
  // non-negative weight to the one before). Prefix 7 is summed another way
  // and may round below prefix 6, so it is left out, as there.
  const __m128d low_lane = _mm_castsi128_pd(_mm_set_epi64x(0, -1));
  const __m128d best = _mm_max_pd(_mm_max_pd(_mm_and_pd(m01, p01), _mm_and_pd(m23, p23)),
                                  _mm_max_pd(_mm_and_pd(m45, p45),
                                             _mm_and_pd(_mm_and_pd(m67, low_lane), p67)));
  *target = t - _mm_cvtsd_f64(_mm_max_sd(best, _mm_unpackhi_pd(best, best)));
  return count;
}
#endif

// The baseline kernel: SSE2 where the compiler targets it (all of x86-64),
// SumTreeChild itself elsewhere.
struct BaselineChild {
  int operator()(const double* line, double* target) const {
#if defined(__SSE2__)
    return ChildSse2(line, target);
#else
    return SumTreeChild(line, target);
#endif
  }
};

#if defined(GEARJAX_HAVE_AVX2_KERNELS)
// Four children per instruction: the pair sums by one horizontal add, then
// the two halves' prefixes by adds of lanes already summed, in the order
// SumTreeChild adds them.
struct Avx2Child {
  GEARJAX_AVX2 int operator()(const double* line, double* target) const {
    const double t = *target;
    const __m256d zero = _mm256_setzero_pd();
    const __m256d lo = _mm256_loadu_pd(line), hi = _mm256_loadu_pd(line + 4);
    const __m256d pairs = _mm256_hadd_pd(lo, hi);  // (s01, s45, s23, s67)
    // (s03, s47, s23 + s01, s67 + s45): addition commutes exactly.
    const __m256d quads = _mm256_add_pd(pairs, _mm256_permute2f128_pd(pairs, pairs, 1));
    const __m256d s03 = _mm256_permute_pd(quads, 0);       // s03 in every lane
    const __m256d s01 = _mm256_permute4x64_pd(pairs, 0);   // s01 in every lane
    // (0 + l0, s01 + 0, s01 + l2, 0 + s03): adding zero changes no weight.
    const __m256d p_lo = _mm256_add_pd(
        _mm256_blend_pd(zero, s01, 0b0110),
        _mm256_blend_pd(_mm256_blend_pd(zero, lo, 0b0101), s03, 0b1000));
    // (s03 + l4, s03 + s45, -, s03 + s47), then lane 2 = (s03 + s45) + l6.
    const __m256d v = _mm256_add_pd(
        s03, _mm256_blend_pd(_mm256_blend_pd(hi, pairs, 0b0010), quads, 0b1000));
    const __m256d p5 = _mm256_permute4x64_pd(v, 0b01010101);
    const __m256d p_hi = _mm256_blend_pd(v, _mm256_add_pd(p5, hi), 0b0100);
    const __m256d tv = _mm256_set1_pd(t);
    const __m256d m_lo = _mm256_cmp_pd(p_lo, tv, _CMP_LE_OQ);
    const __m256d m_hi = _mm256_cmp_pd(p_hi, tv, _CMP_LE_OQ);
    const int count = __builtin_popcount(static_cast<unsigned>(
        _mm256_movemask_pd(m_lo) | (_mm256_movemask_pd(m_hi) << 4)));
    if (count == kFanout) {
      alignas(32) double prefix[kFanout];
      _mm256_store_pd(prefix, p_lo);
      _mm256_store_pd(prefix + 4, p_hi);
      return LastPositiveChild(line, prefix, t, target);
    }
    // As ChildSse2: the largest of prefixes 0..6 that is <= t.
    const __m256d first_three = _mm256_castsi256_pd(_mm256_set_epi64x(0, -1, -1, -1));
    const __m256d best4 = _mm256_max_pd(_mm256_and_pd(m_lo, p_lo),
                                        _mm256_and_pd(_mm256_and_pd(m_hi, first_three), p_hi));
    const __m128d best2 =
        _mm_max_pd(_mm256_castpd256_pd128(best4), _mm256_extractf128_pd(best4, 1));
    *target = t - _mm_cvtsd_f64(_mm_max_sd(best2, _mm_unpackhi_pd(best2, best2)));
    return count;
  }
};
#endif

// Row i's target and its node at the current level, descended level by
// level for all rows, prefetching each row's next line as soon as it is
// known: the rows' cache misses overlap.
template <typename Child>
void Descend(const double* nodes, int32_t levels, const int64_t* offsets, const double* u,
             int64_t n, int64_t* leaves, double* target, LeafPrefetch then) {
  const char* records = static_cast<const char*>(then.base);
  const Child child;
  const double total = nodes[offsets[levels - 1]];
  for (int64_t i = 0; i < n; ++i) {
    target[i] = u[i] * total;
    leaves[i] = 0;
  }
  for (int level = levels - 2; level >= 0; --level) {
    const double* base = nodes + offsets[level];
    const double* next = level > 0 ? nodes + offsets[level - 1] : nullptr;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t node = leaves[i];
      if (node < 0) continue;
      double t = target[i];
      const int c = child(base + node * kFanout, &t);
      target[i] = t;
      leaves[i] = c < 0 ? -1 : node * kFanout + c;
      if (c < 0) continue;
      if (next != nullptr) {
        PrefetchForRead(next + leaves[i] * kFanout);
      } else if (records != nullptr) {
        PrefetchForRead(records + static_cast<size_t>(leaves[i]) * then.stride);
      }
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    if (leaves[i] >= 0 && !(nodes[leaves[i]] > 0.0)) leaves[i] = -1;
  }
}

void DescendBaseline(const double* nodes, int32_t levels, const int64_t* offsets,
                     const double* u, int64_t n, int64_t* leaves, double* target,
                     LeafPrefetch then) {
  Descend<BaselineChild>(nodes, levels, offsets, u, n, leaves, target, then);
}

#if defined(GEARJAX_HAVE_AVX2_KERNELS)
// flatten: the loop and its kernel inlined here, so all of it is compiled
// for AVX2 and the kernel is no call.
GEARJAX_AVX2 __attribute__((flatten)) void DescendAvx2(const double* nodes, int32_t levels,
                                                        const int64_t* offsets, const double* u,
                                                        int64_t n, int64_t* leaves,
                                                        double* target, LeafPrefetch then) {
  Descend<Avx2Child>(nodes, levels, offsets, u, n, leaves, target, then);
}
#endif

#if defined(GEARJAX_HAVE_AVX2_KERNELS)
GEARJAX_AVX2 __attribute__((flatten)) int ChildAvx2(const double* line, double* target) {
  return Avx2Child()(line, target);
}
#endif

}  // namespace

int SumTreeChildCpu(const double* line, double* target) {
#if defined(GEARJAX_HAVE_AVX2_KERNELS)
  if (ActiveSimdLevel() == SimdLevel::kAvx2) return ChildAvx2(line, target);
#endif
  return BaselineChild()(line, target);
}

void SumTree::DrawMany(const double* u, int64_t n, int64_t* leaves, LeafPrefetch then) const {
  targets_.resize(static_cast<size_t>(n));
#if defined(GEARJAX_HAVE_AVX2_KERNELS)
  if (ActiveSimdLevel() == SimdLevel::kAvx2) {
    return DescendAvx2(nodes_.data(), levels_, offsets_, u, n, leaves, targets_.data(), then);
  }
#endif
  DescendBaseline(nodes_.data(), levels_, offsets_, u, n, leaves, targets_.data(), then);
}

}  // namespace gearjax
