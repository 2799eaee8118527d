// Selection in proportion to a weight per live item, kept in a sum tree (see
// sum_tree.h): the base of Timestep (weight = length, uniform.h) and
// Prioritized (weight = priority ** alpha, prioritized.h).
#pragma once

#include <cstdint>
#include <vector>

#include "core/selectors/selector.h"
#include "core/selectors/sum_tree.h"

namespace gearjax {

class WeightTreeSelector : public SamplingSelector {
 public:
  WeightTreeSelector(int64_t capacity, bool gpu_mapped) : weights_(capacity, gpu_mapped) {}
  void Insert(const Item& item) override { weights_.Set(item.slot, Weight(item)); }
  void Delete(const Item& item) override { weights_.Set(item.slot, 0.0); }

  // Draws the rows at once (SumTree::DrawMany, prefetching batch.then for
  // each drawn slot); probability = weight / total. The seed is not read.
  void SelectMany(const SelectionBatch& batch, Selection* out) const override;
  const SumTree* DrawTree() const override { return &weights_; }
  bool DescribeForGpu(GpuSelection* selection) const override;
  // Every eligible item of positive weight (as the tree holds it), in slot
  // order.
  void ListCandidates(const CandidateScan& scan, std::vector<Candidate>* out) const override;
  double Total() const { return weights_.Total(); }
  const SumTree& tree() const { return weights_; }

 protected:
  virtual double Weight(const Item& item) const = 0;
  SumTree weights_;

 private:
  mutable std::vector<int64_t> drawn_;  // SelectMany's scratch (callers hold the table's lock)
};

}  // namespace gearjax
