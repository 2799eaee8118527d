// A float64 sum tree over table slots with eight children per node: the eight
// weights a draw compares at each level share one 64-byte cache line, so a
// tree over 2^20 slots is 7 levels deep instead of 20, and a draw or an update
// costs one cache line per level. Parents are recomputed from their children
// on every update instead of accumulating deltas, so sums never drift however
// many updates are applied. The nodes can live in GPU-mapped pinned memory so
// that GPU kernels draw from the very same tree (SumTreeView and SumTreeDraw
// are host/device code).
//
// Layout: level 0 holds the leaves, level l + 1 holds one node per eight nodes
// of level l, and the last level holds the root alone (its value is the
// total). Every level starts on a 64-byte boundary and is padded with zeros to
// a multiple of eight nodes, so the children of node j of level l + 1 are the
// whole line j of level l.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/common.h"
#include "core/gpu/mapped_array.h"
#include "core/memory.h"

namespace gearjax {

inline constexpr int kSumTreeFanout = 8;
inline constexpr int kSumTreeMaxLevels = 12;  // 8^11 leaves > 2^31 slots

// What a draw reads: where the nodes are and where each level starts.
struct SumTreeView {
  const double* nodes;
  int32_t levels;                       // level 0: leaves; level levels - 1: the root
  int64_t offsets[kSumTreeMaxLevels];   // index of each level's first node
};

GEARJAX_HD double SumTreeTotal(const SumTreeView& t) { return t.nodes[t.offsets[t.levels - 1]]; }

GEARJAX_HD double SumTreeWeight(const SumTreeView& t, int64_t leaf) {
  return t.nodes[t.offsets[0] + leaf];
}

// One level of a descent: the child of `line` (eight weights) whose interval
// holds *target, which is reduced by the weights before it. Branch-free (a
// draw's path is random, so branches would mispredict at every level): the
// child is the number of inclusive prefix sums <= target. Only children of
// positive weight are chosen: a zero-weight child's prefix equals the one
// before it, so it is counted past; when rounding pushes the target past the
// last prefix, the last positive child is taken. Returns -1 if no child is
// positive, which a consistent tree never shows below a positive parent.
GEARJAX_HD int SumTreeChild(const double* line, double* target) {
  const double t = *target;
  // Inclusive prefix sums in three dependent additions; the last one is the
  // line's sum exactly as its parent holds it (see LineSum).
  const double s01 = line[0] + line[1], s23 = line[2] + line[3];
  const double s45 = line[4] + line[5], s67 = line[6] + line[7];
  const double s03 = s01 + s23, s47 = s45 + s67;
  const double prefix[kSumTreeFanout] = {line[0],       s01,       s01 + line[2], s03,
                                         s03 + line[4], s03 + s45, (s03 + s45) + line[6],
                                         s03 + s47};
  int count = 0;
  GEARJAX_UNROLL
  for (int c = 0; c < kSumTreeFanout; ++c) count += prefix[c] <= t ? 1 : 0;
  if (count == kSumTreeFanout) {  // rounding: the last positive child (rare, so a branch)
    int chosen = -1;
    for (int c = 0; c < kSumTreeFanout; ++c) chosen = line[c] > 0.0 ? c : chosen;
    if (chosen > 0) *target = t - prefix[chosen - 1];
    return chosen;
  }
  // The weight before the chosen child: the last prefix <= t (0 if none),
  // which is prefix[count - 1] since prefixes do not decrease. Found by
  // selects on comparisons: indexing the array would send it through memory
  // and stall on the stores just made.
  double before = 0.0;
  GEARJAX_UNROLL
  for (int c = 0; c < kSumTreeFanout - 1; ++c) before = prefix[c] <= t ? prefix[c] : before;
  *target = t - before;
  return count;
}

// The sum of one line as parents hold it: pairwise, in a fixed order (the
// same result everywhere, and the prefix SumTreeChild compares last).
GEARJAX_HD double SumTreeLineSum(const double* c) {
  return ((c[0] + c[1]) + (c[2] + c[3])) + ((c[4] + c[5]) + (c[6] + c[7]));
}

// The leaf whose cumulative-weight interval holds u * total, u in [0, 1).
// Never a zero-weight leaf; -1 only for an empty or inconsistent tree.
GEARJAX_HD int64_t SumTreeDraw(const SumTreeView& t, double u) {
  double target = u * SumTreeTotal(t);
  int64_t node = 0;
  for (int level = t.levels - 2; level >= 0; --level) {
    const int c = SumTreeChild(t.nodes + t.offsets[level] + node * kSumTreeFanout, &target);
    if (c < 0) return -1;
    node = node * kSumTreeFanout + c;
  }
  return SumTreeWeight(t, node) > 0.0 ? node : -1;
}

// SumTreeChild as the CPU kernel of the active SIMD level computes it (see
// sum_tree_draw_cpu.cc): the same child and the same remaining target at
// every level. For tests; DrawMany runs the kernels inline.
int SumTreeChildCpu(const double* line, double* target);

// Memory a batched draw prefetches for each leaf it draws, as soon as the leaf
// is known: base + leaf * stride (the table's slot records, which the caller
// reads next), or nothing when base is null. Those reads then miss while the
// descent still works instead of after it.
struct LeafPrefetch {
  const void* base = nullptr;
  size_t stride = 0;
};

class TreeMirror;

class SumTree {
 public:
  // A tree over `num_leaves` leaves (>= 1), all of weight 0.
  SumTree(int64_t num_leaves, bool gpu_mapped);
  // The nodes such a tree holds, padding included (for memory estimates).
  static int64_t NodesFor(int64_t num_leaves);

  double Get(int64_t leaf) const { return nodes_[leaf]; }
  double Total() const { return nodes_[offsets_[levels_ - 1]]; }
  // Every node, padding included (the span one-sided readers register).
  size_t node_count() const { return nodes_.size(); }
  int64_t leaves() const { return leaves_; }

  // Sets one leaf and recomputes its ancestors.
  void Set(int64_t leaf, double weight);
  // Sets n leaves (a leaf given twice ends with its last weight), then
  // recomputes every affected ancestor once, level by level, so the cache
  // misses of one level overlap instead of following each other.
  void SetMany(const int64_t* leaves, const double* weights, int64_t n);
  // Makes SetMany's scratch for n leaves now, so a SetMany of at most n
  // leaves allocates nothing: a caller that must not fail halfway through an
  // update (std::bad_alloc) reserves before it writes anything.
  void Reserve(int64_t n);

  // SumTreeDraw for one u, and for n at once: the n descents advance level by
  // level, prefetching each one's next line, so their cache misses overlap.
  // Both give exactly what SumTreeDraw gives for the same u.
  int64_t Draw(double u) const { return SumTreeDraw(view(), u); }
  void DrawMany(const double* u, int64_t n, int64_t* leaves, LeafPrefetch then = {}) const;

  // The tree at host addresses, and at the GPU's (nodes == nullptr when the
  // tree is not GPU-mapped).
  SumTreeView view() const { return View(nodes_.data()); }
  SumTreeView device_view() const { return View(nodes_.device_data()); }

  // The tree's copy in GPU memory (tree_mirror.h), made by the first call
  // from `memory` (when the tree is GPU-mapped); from then on every write
  // is logged for the next copy. nullptr when there is none and none can be
  // made (asked once: a failed allocation is not retried). The mirror is a
  // cache of the nodes in another memory, not part of the tree's value,
  // hence const (the caller holds the table's lock).
  TreeMirror* Mirror(const DeviceMemory* memory) const;
  TreeMirror* mirror() const { return mirror_.get(); }
  ~SumTree();

 private:
  SumTreeView View(const double* nodes) const;

  int64_t leaves_;
  int32_t levels_ = 0;
  int64_t offsets_[kSumTreeMaxLevels] = {};
  MappedArray<double> nodes_;
  std::vector<int64_t> dirty_;            // SetMany's scratch: the nodes of one level to sum
  std::vector<uint64_t> seen_;            // SetMany's scratch: one bit per inner node, all 0
  mutable std::vector<double> targets_;  // DrawMany's scratch (callers hold the table's lock)
  mutable std::unique_ptr<TreeMirror> mirror_;
  mutable bool mirror_refused_ = false;
};

}  // namespace gearjax
