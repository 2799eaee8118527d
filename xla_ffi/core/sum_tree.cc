// The eight-way sum tree (see sum_tree.h).
#include "sum_tree.h"

#include <algorithm>

#include "common.h"
#include "prefetch.h"

namespace gearjax {
namespace {

constexpr int64_t kFanout = kSumTreeFanout;

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
  dirty_.resize(static_cast<size_t>(n));
  constexpr int64_t kLeavesAhead = 16;  // leaves prefetched ahead of the one written
  for (int64_t i = 0; i < std::min(n, kLeavesAhead); ++i) PrefetchForRead(&nodes_[leaves[i]]);
  for (int64_t i = 0; i < n; ++i) {
    if (i + kLeavesAhead < n) PrefetchForRead(&nodes_[leaves[i + kLeavesAhead]]);
    nodes_[leaves[i]] = weights[i];
    dirty_[i] = leaves[i] / kFanout;
  }
  std::sort(dirty_.begin(), dirty_.end());
  int64_t count = std::unique(dirty_.begin(), dirty_.end()) - dirty_.begin();
  constexpr int64_t kAhead = 8;  // lines prefetched ahead of the one summed
  for (int level = 1; level < levels_; ++level) {
    const double* below = &nodes_[offsets_[level - 1]];
    for (int64_t i = 0; i < std::min(count, kAhead); ++i) PrefetchForRead(below + dirty_[i] * kFanout);
    for (int64_t i = 0; i < count; ++i) {
      if (i + kAhead < count) PrefetchForRead(below + dirty_[i + kAhead] * kFanout);
      Recompute(level, dirty_[i]);
    }
    // Parents of sorted, distinct nodes are sorted; drop the repeats.
    int64_t parents = 0;
    for (int64_t i = 0; i < count; ++i) {
      const int64_t parent = dirty_[i] / kFanout;
      if (parents == 0 || dirty_[parents - 1] != parent) dirty_[parents++] = parent;
    }
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
      const int c = SumTreeChild(base + node * kFanout, &t);
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
