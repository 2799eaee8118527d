// The eight-way sum tree (see sum_tree.h).
#include "sum_tree.h"

#include <algorithm>

#include "common.h"
#include "prefetch.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace gearjax {
namespace {

constexpr int64_t kFanout = kSumTreeFanout;

#if defined(__SSE2__)
// SumTreeChild, two children per instruction: the same sums in the same
// order (so the same doubles), the same comparisons, the same child and
// target. Hand-written because the compiler keeps the scalar version scalar,
// and a batch of draws is instruction-bound once its cache misses overlap.
// SSE2 is part of x86-64, so this needs no CPU dispatch.
int ChildSse2(const double* line, double* target) {
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
  if (count == kFanout) {  // rounding: the last positive child (rare)
    alignas(16) double prefix[kFanout];
    _mm_store_pd(prefix, p01);
    _mm_store_pd(prefix + 2, p23);
    _mm_store_pd(prefix + 4, p45);
    _mm_store_pd(prefix + 6, p67);
    int chosen = -1;
    for (int c = 0; c < kFanout; ++c) chosen = line[c] > 0.0 ? c : chosen;
    if (chosen > 0) *target = t - prefix[chosen - 1];
    return chosen;
  }
  // The last of prefixes 0..6 that is <= t: the largest, as those never
  // decrease (each adds a non-negative weight to the one before).
  const __m128d low_lane = _mm_castsi128_pd(_mm_set_epi64x(0, -1));
  const __m128d best = _mm_max_pd(_mm_max_pd(_mm_and_pd(m01, p01), _mm_and_pd(m23, p23)),
                                  _mm_max_pd(_mm_and_pd(m45, p45),
                                             _mm_and_pd(_mm_and_pd(m67, low_lane), p67)));
  *target = t - _mm_cvtsd_f64(_mm_max_sd(best, _mm_unpackhi_pd(best, best)));
  return count;
}
#endif

// The child of `line` a CPU draw takes: see SumTreeChild.
inline int CpuChild(const double* line, double* target) {
#if defined(__SSE2__)
  return ChildSse2(line, target);
#else
  return SumTreeChild(line, target);
#endif
}

int64_t RoundUpToLine(int64_t n) { return (n + kFanout - 1) / kFanout * kFanout; }

// Level sizes and offsets for `leaves` leaves; returns the number of nodes.
int64_t Plan(int64_t leaves, int32_t* levels, int64_t* offsets) {
  if (leaves < 1) throw InvalidArgument("a sum tree needs at least one leaf");
  int64_t size = leaves, total = 0;
  int32_t level = 0;
  for (;;) {
    if (level == kSumTreeMaxLevels) throw InvalidArgument("too many leaves for a sum tree");
    offsets[level++] = total;
    total += RoundUpToLine(size);
    if (size == 1) break;
    size = (size + kFanout - 1) / kFanout;
  }
  *levels = level;
  return total;
}

int64_t PlannedNodes(int64_t leaves) {
  int32_t levels;
  int64_t offsets[kSumTreeMaxLevels];
  return Plan(leaves, &levels, offsets);
}

}  // namespace

SumTree::SumTree(int64_t num_leaves, bool gpu_mapped)
    : leaves_(num_leaves),
      nodes_(static_cast<size_t>(PlannedNodes(num_leaves)), gpu_mapped) {
  Plan(leaves_, &levels_, offsets_);
}

SumTreeView SumTree::View(const double* nodes) const {
  SumTreeView v{};
  v.nodes = nodes;
  v.levels = levels_;
  std::copy(offsets_, offsets_ + kSumTreeMaxLevels, v.offsets);
  return v;
}

void SumTree::Recompute(int level, int64_t node) {
  nodes_[offsets_[level] + node] = SumTreeLineSum(&nodes_[offsets_[level - 1] + node * kFanout]);
}

void SumTree::Set(int64_t leaf, double weight) {
  nodes_[leaf] = weight;
  int64_t node = leaf;
  for (int level = 1; level < levels_; ++level) {
    node /= kFanout;
    Recompute(level, node);
  }
}

void SumTree::SetMany(const int64_t* leaves, const double* weights, int64_t n) {
  if (n <= 0) return;
  if (n == 1) return Set(leaves[0], weights[0]);
  constexpr int64_t kLeavesAhead = 16;  // leaves prefetched ahead of the one written
  for (int64_t i = 0; i < std::min(n, kLeavesAhead); ++i) PrefetchForRead(&nodes_[leaves[i]]);
  for (int64_t i = 0; i < n; ++i) {
    if (i + kLeavesAhead < n) PrefetchForRead(&nodes_[leaves[i + kLeavesAhead]]);
    nodes_[leaves[i]] = weights[i];
  }
  if (levels_ == 1) return;
  // Each level's distinct parents of the nodes changed below, found with one
  // bit per inner node (set while collecting, cleared after): no sort, and
  // each line is summed once however many of its children changed.
  if (seen_.empty()) {
    seen_.assign(static_cast<size_t>((nodes_.size() - offsets_[1] + 63) / 64), 0);
  }
  dirty_.resize(static_cast<size_t>(n));
  const int64_t* changed = leaves;
  int64_t count = n;
  constexpr int64_t kAhead = 8;  // lines prefetched ahead of the one summed
  for (int level = 1; level < levels_; ++level) {
    const int64_t bit_base = offsets_[level] - offsets_[1];
    int64_t parents = 0;
    for (int64_t i = 0; i < count; ++i) {  // writes dirty_[parents <= i] after reading changed[i]
      const int64_t parent = changed[i] / kFanout;
      const int64_t bit = bit_base + parent;
      uint64_t& word = seen_[static_cast<size_t>(bit / 64)];
      const uint64_t mask = uint64_t{1} << (bit % 64);
      if (word & mask) continue;
      word |= mask;
      dirty_[parents++] = parent;
    }
    const double* below = &nodes_[offsets_[level - 1]];
    double* here = &nodes_[offsets_[level]];
    for (int64_t i = 0; i < std::min(parents, kAhead); ++i) {
      PrefetchForRead(below + dirty_[i] * kFanout);
    }
    for (int64_t i = 0; i < parents; ++i) {
      if (i + kAhead < parents) PrefetchForRead(below + dirty_[i + kAhead] * kFanout);
      const int64_t node = dirty_[i];
      here[node] = SumTreeLineSum(below + node * kFanout);
      const int64_t bit = bit_base + node;
      seen_[static_cast<size_t>(bit / 64)] &= ~(uint64_t{1} << (bit % 64));
    }
    changed = dirty_.data();
    count = parents;
  }
}

void SumTree::DrawMany(const double* u, int64_t n, int64_t* leaves) const {
  // Row i's target and its node at the current level, descended level by
  // level for all rows, prefetching each row's next line as soon as it is
  // known: the rows' cache misses overlap.
  targets_.resize(static_cast<size_t>(n));
  double* target = targets_.data();
  const double total = Total();
  const double* nodes = nodes_.data();
  for (int64_t i = 0; i < n; ++i) {
    target[i] = u[i] * total;
    leaves[i] = 0;
  }
  for (int level = levels_ - 2; level >= 0; --level) {
    const double* base = nodes + offsets_[level];
    const double* next = level > 0 ? nodes + offsets_[level - 1] : nullptr;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t node = leaves[i];
      if (node < 0) continue;
      double t = target[i];
      const int c = CpuChild(base + node * kFanout, &t);
      target[i] = t;
      leaves[i] = c < 0 ? -1 : node * kFanout + c;
      if (next != nullptr && c >= 0) PrefetchForRead(next + leaves[i] * kFanout);
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    if (leaves[i] >= 0 && !(nodes[leaves[i]] > 0.0)) leaves[i] = -1;
  }
}

}  // namespace gearjax
