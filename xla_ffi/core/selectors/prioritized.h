// Prioritized(alpha): trajectories drawn in proportion to priority ** alpha,
// from a sum tree of those weights (one tree per alpha a table samples with).
#pragma once

#include <cstdint>
#include <vector>

#include "core/selectors/priority_weight.h"
#include "core/selectors/weight_tree.h"

namespace gearjax {

class PrioritizedSelector final : public WeightTreeSelector {
 public:
  PrioritizedSelector(double alpha, int64_t capacity, bool gpu_mapped)
      : WeightTreeSelector(capacity, gpu_mapped), alpha_(alpha) {}
  bool UsesPriority() const override { return true; }
  // One batched tree update for all n (SumTree::SetMany).
  void UpdatePriorities(const Item* before, const double* priorities, int64_t n) override;
  void ReserveUpdates(int64_t n) override;

  double alpha() const { return alpha_; }

 private:
  double Weight(const Item& item) const override { return PriorityWeight(item.priority, alpha_); }

  double alpha_;
  std::vector<int64_t> slots_;   // UpdatePriorities' scratch (callers hold the table's lock)
  std::vector<double> values_;
};

}  // namespace gearjax
