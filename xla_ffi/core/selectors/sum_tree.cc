// The eight-way sum tree (see sum_tree.h).
#include "core/selectors/sum_tree.h"

#include <algorithm>

#include "core/common.h"
#include "core/gpu/tree_mirror.h"
#include "core/prefetch.h"

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

int64_t SumTree::NodesFor(int64_t num_leaves) { return PlannedNodes(num_leaves); }

SumTree::~SumTree() = default;

TreeMirror* SumTree::Mirror(const DeviceMemory* memory) const {
  if (mirror_ != nullptr || mirror_refused_) return mirror_.get();
  if (memory == nullptr || nodes_.device_data() == nullptr) return nullptr;
  try {
    mirror_ = std::make_unique<TreeMirror>(nodes_.size(), memory);
  } catch (const std::bad_alloc&) {
    mirror_refused_ = true;  // the mapped tree serves
  }
  return mirror_.get();
}

SumTreeView SumTree::View(const double* nodes) const {
  SumTreeView v{};
  v.nodes = nodes;
  v.levels = levels_;
  std::copy(offsets_, offsets_ + kSumTreeMaxLevels, v.offsets);
  return v;
}

void SumTree::Set(int64_t leaf, double weight) {
  nodes_[leaf] = weight;
  int64_t node = leaf;
  for (int level = 1; level < levels_; ++level) {
    node /= kFanout;
    nodes_[offsets_[level] + node] = SumTreeLineSum(&nodes_[offsets_[level - 1] + node * kFanout]);
  }
  // Logged after the walk, not in it: a tree without a mirror (every host
  // table's) pays one test a write, not one a level.
  if (mirror_ != nullptr) {
    node = leaf;
    mirror_->Wrote(node);
    for (int level = 1; level < levels_; ++level) {
      node /= kFanout;
      mirror_->Wrote(offsets_[level] + node);
    }
  }
}

void SumTree::Reserve(int64_t n) {
  if (levels_ == 1) return;  // no inner nodes: SetMany needs no scratch
  if (seen_.empty()) {
    seen_.assign(static_cast<size_t>((nodes_.size() - offsets_[1] + 63) / 64), 0);
  }
  dirty_.reserve(static_cast<size_t>(std::max<int64_t>(n, 0)));
}

void SumTree::SetMany(const int64_t* leaves, const double* weights, int64_t n) {
  if (n <= 0) return;
  if (n == 1) return Set(leaves[0], weights[0]);
  // Leaves prefetched ahead of the one written: several windows' worth, as
  // a caller's leaves often run in windows of consecutive steps, whose
  // leaves share a few lines (a store that misses holds the store buffer).
  constexpr int64_t kLeavesAhead = 64;
  for (int64_t i = 0; i < std::min(n, kLeavesAhead); ++i) PrefetchForRead(&nodes_[leaves[i]]);
  for (int64_t i = 0; i < n; ++i) {
    if (i + kLeavesAhead < n) PrefetchForRead(&nodes_[leaves[i + kLeavesAhead]]);
    nodes_[leaves[i]] = weights[i];
  }
  if (mirror_ != nullptr) {
    for (int64_t i = 0; i < n; ++i) mirror_->Wrote(leaves[i]);
  }
  if (levels_ == 1) return;
  // Each level's distinct parents of the nodes changed below, found with one
  // bit per inner node (set while collecting, cleared after): no sort, and
  // each line is summed once however many of its children changed.
  Reserve(n);
  dirty_.resize(static_cast<size_t>(n));
  const int64_t* changed = leaves;
  int64_t count = n;
  constexpr int64_t kAhead = 8;  // lines prefetched ahead of the one summed
  for (int level = 1; level < levels_; ++level) {
    const int64_t bit_base = offsets_[level] - offsets_[1];
    int64_t parents = 0;
    // Whether a parent was seen already is a coin toss on the middle
    // levels, so it is counted without a branch (a branch would mispredict
    // there); only a repeat of the node before's parent is skipped. Writes
    // dirty_[parents <= i] after reading changed[i].
    int64_t previous = -1;
    for (int64_t i = 0; i < count; ++i) {
      const int64_t parent = changed[i] / kFanout;
      // The parent of the node before, taken just now: callers' leaves run
      // in order (a window's steps), so most share their neighbour's line,
      // and this skips the bit's read-modify-write, which would wait on the
      // store before it to the same word.
      if (parent == previous) continue;
      previous = parent;
      const int64_t bit = bit_base + parent;
      uint64_t& word = seen_[static_cast<size_t>(bit / 64)];
      const uint64_t mask = uint64_t{1} << (bit % 64);
      const int64_t fresh = (word & mask) == 0;
      word |= mask;
      dirty_[parents] = parent;
      parents += fresh;
    }
    const double* below = &nodes_[offsets_[level - 1]];
    double* here = &nodes_[offsets_[level]];
    for (int64_t i = 0; i < std::min(parents, kAhead); ++i) {
      PrefetchForRead(below + dirty_[i] * kFanout);
    }
    for (int64_t i = 0; i < parents; ++i) {
      if (i + kAhead < parents) {
        PrefetchForRead(below + dirty_[i + kAhead] * kFanout);
        PrefetchForRead(here + dirty_[i + kAhead]);  // the parent written
      }
      const int64_t node = dirty_[i];
      here[node] = SumTreeLineSum(below + node * kFanout);
      if (mirror_ != nullptr) mirror_->Wrote(offsets_[level] + node);
      // Every bit set in the word is a parent of this level in dirty_ (the
      // level below's were cleared, the level above's are not set yet), so
      // zeroing the word clears this one's and waits on nothing.
      seen_[static_cast<size_t>((bit_base + node) / 64)] = 0;
    }
    changed = dirty_.data();
    count = parents;
  }
}

}  // namespace gearjax
