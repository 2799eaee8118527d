// Prioritized(alpha): trajectories drawn in proportion to priority ** alpha,
// from a sum tree of those weights (one tree per alpha a table samples with).
#pragma once

#include <cstdint>
#include <vector>

#include "core/sum_tree.h"
#include "core/selectors/selector.h"

namespace gearjax {

// The weight of a priority under alpha: 1 for alpha == 0 (uniform, priority 0
// included), 0 for priority 0, otherwise priority ** alpha raised to at least
// kMinWeight, so a positive priority never becomes undrawable (see limits.h,
// which also bounds priority and alpha so the weight stays finite).
double PriorityWeight(double priority, double alpha);

class PrioritizedSelector final : public Selector {
 public:
  PrioritizedSelector(double alpha, int64_t capacity, bool gpu_mapped)
      : alpha_(alpha), weights_(capacity, gpu_mapped) {}
  void Insert(const Item& item) override;
  void Delete(const Item& item) override;
  bool UsesPriority() const override { return true; }
  // One batched tree update for all n (SumTree::SetMany).
  void UpdatePriorities(const Item* before, const double* priorities, int64_t n) override;

  double alpha() const { return alpha_; }
  double Total() const { return weights_.Total(); }
  // Draws n rows at once (SumTree::DrawMany).
  void SelectMany(const double* u, int64_t n, Selection* out) const;
  const SumTree& tree() const { return weights_; }

 private:
  double alpha_;
  SumTree weights_;
  std::vector<int64_t> slots_;   // scratch (callers hold the table's lock)
  std::vector<double> values_;
  mutable std::vector<int64_t> drawn_;
};

}  // namespace gearjax
