// Drawing steps by their priorities (see step_prioritized.h).
#include "core/selectors/step_prioritized.h"

#include <algorithm>

#include "core/common.h"
#include "core/gpu/gpu_selection.h"
#include "core/selectors/candidate_scan.h"
#include "core/selectors/priority_weight_cpu.h"
#include "core/selectors/sum_tree_range.h"
#include "core/table/slots.h"

namespace gearjax {

StepPrioritizedSelector::StepPrioritizedSelector(double alpha, int64_t capacity,
                                                 int64_t max_length, const double* steps,
                                                 const SlotInfo* slots, bool gpu_mapped)
    : alpha_(alpha), max_length_(max_length), steps_(steps), slots_(slots),
      tree_(capacity * max_length, gpu_mapped) {}

bool StepPrioritizedSelector::DescribeForGpu(GpuSelection* selection) const {
  selection->uniform = false;
  selection->tree = tree_.device_view();
  if (selection->tree.nodes == nullptr) throw InvalidArgument("the step tree is not GPU-mapped");
  selection->leaves_per_slot = max_length_;
  return true;
}

void StepPrioritizedSelector::SetFullLeaves(const int64_t* leaves, int64_t n, int64_t length) {
  if (full_.empty()) return;
  for (FullWindows& full : full_) {
    full_weights_.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t slot = leaves[i] / max_length_, step = leaves[i] % max_length_;
      const int64_t steps = length >= 0 ? length : slots_[slot].length;
      full_weights_[i] = step <= steps - full.window ? tree_.Get(leaves[i]) : 0.0;
    }
    full.tree->SetMany(leaves, full_weights_.data(), n);
  }
}

StepPrioritizedSelector::FullWindows& StepPrioritizedSelector::FullTreeFor(int64_t window) {
  ++full_draws_;
  for (FullWindows& f : full_) {
    if (f.window != window) continue;
    f.used = full_draws_;
    return f;
  }
  // A full set gives up its least recently drawn tree, freed before its
  // successor is made: one tree's memory at a time. The entry goes with it,
  // so should the new tree not be made (std::bad_alloc), no entry is left
  // without its tree, or with a tree half filled: the width is rebuilt on its
  // next draw, as any width not kept is.
  if (full_.size() >= static_cast<size_t>(kMaxFullWindowTrees)) {
    full_.erase(std::min_element(full_.begin(), full_.end(),
                                 [](const FullWindows& a, const FullWindows& b) {
                                   return a.used < b.used;
                                 }));
  }
  std::vector<int64_t> leaves;
  std::vector<double> weights;
  for (int64_t slot = 0; slot * max_length_ < tree_.leaves(); ++slot) {
    if (slots_[slot].state != SlotState::kLive) continue;
    for (int64_t t = 0; t <= slots_[slot].length - window; ++t) {
      leaves.push_back(slot * max_length_ + t);
      weights.push_back(tree_.Get(leaves.back()));
    }
  }
  auto tree = std::make_unique<SumTree>(tree_.leaves(), false);
  tree->SetMany(leaves.data(), weights.data(), static_cast<int64_t>(leaves.size()));
  full_.reserve(static_cast<size_t>(kMaxFullWindowTrees));  // the push below cannot throw
  full_.push_back({window, std::move(tree), full_draws_});
  return full_.back();
}

bool StepPrioritizedSelector::SelectFull(const SelectionBatch& batch, int64_t window,
                                         Selection* out) {
  FullWindows* full = &FullTreeFor(window);
  const double total = full->tree->Total();
  if (!(total > 0)) return false;
  drawn_.resize(static_cast<size_t>(batch.n));
  full->tree->DrawMany(batch.u, batch.n, drawn_.data());
  for (int64_t i = 0; i < batch.n; ++i) {
    const int64_t leaf = drawn_[i];
    if (leaf < 0) return false;  // an inconsistent tree: list instead
    out[i] = {leaf / max_length_, full->tree->Get(leaf) / total, leaf % max_length_};
  }
  return true;
}

void StepPrioritizedSelector::Insert(const Item& item) {
  leaves_.clear();
  weights_.clear();
  const int64_t first = item.slot * max_length_;
  for (int64_t t = 0; t < item.length; ++t) leaves_.push_back(first + t);
  weights_.resize(leaves_.size());
  PriorityWeightsCpu(steps_ + first, alpha_, weights_.data(), item.length);
  tree_.SetMany(leaves_.data(), weights_.data(), static_cast<int64_t>(leaves_.size()));
  SetFullLeaves(leaves_.data(), static_cast<int64_t>(leaves_.size()), item.length);
}

void StepPrioritizedSelector::Delete(const Item& item) {
  leaves_.clear();
  const int64_t first = item.slot * max_length_;
  for (int64_t t = 0; t < item.length; ++t) leaves_.push_back(first + t);
  weights_.assign(leaves_.size(), 0.0);
  tree_.SetMany(leaves_.data(), weights_.data(), static_cast<int64_t>(leaves_.size()));
  for (FullWindows& full : full_) {
    full.tree->SetMany(leaves_.data(), weights_.data(), static_cast<int64_t>(leaves_.size()));
  }
}

void StepPrioritizedSelector::UpdatePriorities(const Item* before, const double* priorities,
                                               int64_t n) {
  (void)priorities;  // the table has written them into every step
  leaves_.clear();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t first = before[i].slot * max_length_;
    for (int64_t t = 0; t < before[i].length; ++t) leaves_.push_back(first + t);
  }
  weights_.resize(leaves_.size());
  for (size_t i = 0; i < leaves_.size(); ++i) weights_[i] = steps_[leaves_[i]];
  PriorityWeightsCpu(weights_.data(), alpha_, weights_.data(),
                     static_cast<int64_t>(weights_.size()));
  tree_.SetMany(leaves_.data(), weights_.data(), static_cast<int64_t>(leaves_.size()));
  SetFullLeaves(leaves_.data(), static_cast<int64_t>(leaves_.size()), -1);
}

void StepPrioritizedSelector::ReserveSteps(int64_t n) {
  leaves_.reserve(static_cast<size_t>(n));  // UpdatePriorities' (SetSteps takes the caller's)
  weights_.reserve(static_cast<size_t>(n));
  tree_.Reserve(n);
  if (full_.empty()) return;
  full_weights_.reserve(static_cast<size_t>(n));
  for (FullWindows& full : full_) full.tree->Reserve(n);
}

void StepPrioritizedSelector::SetSteps(const int64_t* leaves, int64_t n) {
  weights_.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) weights_[i] = steps_[leaves[i]];
  PriorityWeightsCpu(weights_.data(), alpha_, weights_.data(), n);
  tree_.SetMany(leaves, weights_.data(), n);
  SetFullLeaves(leaves, n, -1);
}

void StepPrioritizedSelector::SelectMany(const SelectionBatch& batch, Selection* out) const {
  drawn_.resize(static_cast<size_t>(batch.n));
  tree_.DrawMany(batch.u, batch.n, drawn_.data());
  const double total = tree_.Total();
  for (int64_t i = 0; i < batch.n; ++i) {
    const int64_t leaf = drawn_[i];
    if (leaf < 0) {
      out[i] = {-1, 0.0};
      continue;
    }
    out[i] = {leaf / max_length_, tree_.Get(leaf) / total, leaf % max_length_};
  }
}

int64_t StepPrioritizedSelector::Places(const SlotInfo& info, int64_t full_window) const {
  return full_window > 0 ? info.length - full_window + 1 : info.length;
}

void StepPrioritizedSelector::ListCandidates(const CandidateScan& scan,
                                             std::vector<Candidate>* out) const {
  const SumTreeView view = tree_.view();
  ListInSlotOrder(scan, [&](int64_t slot, const SlotInfo& info) {
    const int64_t first = slot * max_length_;
    return SumTreeRangeSum(view, first, first + Places(info, scan.full_window));
  }, out);
}

void StepPrioritizedSelector::PlaceDrawnSteps(const SlotInfo* slots, int64_t full_window,
                                              const double* u, Selection* rows,
                                              int64_t n) const {
  const SumTreeView view = tree_.view();
  for (int64_t b = 0; b < n; ++b) {
    Selection& row = rows[b];
    const int64_t first = row.slot * max_length_;
    const int64_t last = first + Places(slots[row.slot], full_window);
    const int64_t leaf = SumTreeDrawInRange(view, first, last, u[b]);
    const double weight = SumTreeRangeSum(view, first, last);
    if (leaf < 0 || !(weight > 0)) continue;  // listed with a positive weight: not reached
    row.step = leaf - first;
    row.probability *= tree_.Get(leaf) / weight;
  }
}

}  // namespace gearjax
