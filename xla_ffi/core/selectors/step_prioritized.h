// PrioritizedSteps(alpha): a step of a stored trajectory drawn in proportion
// to its priority ** alpha, on tables that keep a priority per step
// (TableSpec::step_priorities); the drawn step places the row's window
// (WindowAtStep: it starts there, or ends there with cut="end"). One sum
// tree of capacity * max_length leaves a table and alpha: step t of slot s
// is leaf s * max_length + t, so a trajectory's steps are a run of leaves
// (range sums and draws: sum_tree_range.h), and steps past its length weigh
// 0. Selected on the host (strategies.h: draws_steps).
//
// cut="full" with replacement draws from a second tree per window width
// (FullWindows): the same weights on the steps a full window of that width
// may start at, 0 elsewhere, so such a draw is one descent too, not a
// listing of every trajectory. Made on first use, filled from the records,
// kept up to date like the first; at most kMaxFullWindowTrees an alpha: a
// further width rebuilds the least recently used one (O(steps)). Rebuilt,
// never listed instead: a tree's sums are a function of its leaves
// (sum_tree.h), so a width draws the rows it would have drawn had its tree
// been kept all along, and a batch does not depend on the widths sampled
// before it (a listing draws other rows for the same key).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/selectors/selector.h"
#include "core/selectors/sum_tree.h"

namespace gearjax {

// Full-window trees a step selector keeps at most (each 9.1 bytes a step:
// a table's worst memory counts them for every alpha, footprint.h).
inline constexpr int kMaxFullWindowTrees = 2;

class StepPrioritizedSelector final : public SamplingSelector {
 public:
  // `steps`: the table's step priorities, max_length a slot, which the
  // table keeps up to date before it tells the selector; `slots`: the
  // table's slot records (capacity of them). Both read, never written, here.
  // `gpu_mapped`: the step tree in GPU-mapped pinned memory, which GPU
  // selection kernels descend (DescribeForGpu).
  StepPrioritizedSelector(double alpha, int64_t capacity, int64_t max_length,
                          const double* steps, const SlotInfo* slots, bool gpu_mapped = false);
  // Every step's leaf of the item, from the table's step priorities.
  void Insert(const Item& item) override;
  void Delete(const Item& item) override;
  bool UsesPriority() const override { return true; }
  // Items whose every step the table set to priorities[i]: their leaves.
  void UpdatePriorities(const Item* before, const double* priorities, int64_t n) override;
  // Step leaves (slot * max_length + step) whose priorities the table set.
  void SetSteps(const int64_t* leaves, int64_t n);
  // Makes the scratch of n step leaves, so a SetSteps of at most n, or an
  // UpdatePriorities of items of at most n steps in all, allocates nothing
  // (see Selector::ReserveUpdates).
  void ReserveSteps(int64_t n);

  // Each row's slot, step and probability (the step's weight over the
  // total); prefetches nothing (a leaf is not a slot).
  void SelectMany(const SelectionBatch& batch, Selection* out) const override;
  double TotalWeight() const override { return tree_.Total(); }
  // The step tree, which one-sided readers of other processes descend too:
  // its leaf s * max_length + t is step t of slot s (core/one_sided/one_sided_tree.cc).
  const SumTree* DrawTree() const override { return &tree_; }
  // A GPU draw (cut "start" or "end", with replacement) descends the step
  // tree too, max_length leaves a slot (select_block.h SelectRow).
  bool DescribeForGpu(GpuSelection* selection) const override;
  // Every eligible item, weighing the steps a window may be placed at: the
  // first length - full_window + 1 (cut="full"), else all of them.
  void ListCandidates(const CandidateScan& scan, std::vector<Candidate>* out) const override;
  // Rows drawn among the candidates: each one's step within its item, in
  // proportion to its weight (u[b], a fresh uniform a row), and the row's
  // probability times the step's share of the item's weight.
  void PlaceDrawnSteps(const SlotInfo* slots, int64_t full_window, const double* u,
                       Selection* rows, int64_t n) const override;

  // cut="full" rows with replacement, `window` steps wide, drawn from that
  // width's tree (FullTreeFor): false, drawing nothing, where no step may
  // start a full window (the caller lists instead, and finds none).
  bool SelectFull(const SelectionBatch& batch, int64_t window, Selection* out);

  double alpha() const { return alpha_; }
  const SumTree& tree() const { return tree_; }

 private:
  struct FullWindows {
    int64_t window;
    std::unique_ptr<SumTree> tree;
    uint64_t used;  // the SelectFull call that last drew from it
  };
  // The tree of `window`: kept, new, or the least recently used one rebuilt
  // for it once kMaxFullWindowTrees are made; filled from the live records.
  FullWindows& FullTreeFor(int64_t window);
  // The leaves a window may be placed at: [first, first + count).
  int64_t Places(const SlotInfo& info, int64_t full_window) const;
  // Sets `leaves` in every full-window tree from the step priorities (0 past
  // the starts of full windows of its slot, whose length is `length`, or
  // the record's when length < 0).
  void SetFullLeaves(const int64_t* leaves, int64_t n, int64_t length);

  double alpha_;
  int64_t max_length_;
  const double* steps_;
  const SlotInfo* slots_;
  SumTree tree_;
  std::vector<FullWindows> full_;
  uint64_t full_draws_ = 0;  // SelectFull calls so far (FullWindows::used)
  std::vector<double> full_weights_;  // scratch
  std::vector<int64_t> leaves_;  // scratch (callers hold the table's lock)
  std::vector<double> weights_;
  mutable std::vector<int64_t> drawn_;
};

}  // namespace gearjax
