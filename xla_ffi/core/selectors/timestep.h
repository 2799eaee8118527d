// Timestep(): draws a trajectory in proportion to its length, so every
// stored step is equally likely (a sum tree of lengths: weight_tree.h).
#pragma once

#include "core/selectors/weight_tree.h"

namespace gearjax {

class TimestepSelector final : public WeightTreeSelector {
 public:
  using WeightTreeSelector::WeightTreeSelector;
  // Every eligible item in slot order, weighed by its windows: its length,
  // or under cut="full" its full windows, length - window + 1.
  void ListCandidates(const CandidateScan& scan, std::vector<Candidate>* out) const override;

 private:
  double Weight(const Item& item) const override { return static_cast<double>(item.length); }
};

}  // namespace gearjax
