// The uniform family: Uniform draws every live trajectory with the same
// probability; Timestep draws trajectories in proportion to their length, so
// every stored step is equally likely as a window start. Both are sum trees
// over slots (weight 1 per live slot, or its length): a draw depends only on
// which slots are live, never on the order they became so, so a table restored
// from a checkpoint (slot layout included) draws exactly what the saved one
// drew, and the GPU selection reads the same tree.
#pragma once

#include <cstdint>

#include "core/sum_tree.h"
#include "core/selectors/selector.h"

namespace gearjax {

// A sum tree of one weight per live slot, `weight(item)`.
class WeightTreeSelector : public Selector {
 public:
  WeightTreeSelector(int64_t capacity, bool gpu_mapped) : weights_(capacity, gpu_mapped) {}
  void Insert(const Item& item) override { weights_.Set(item.slot, Weight(item)); }
  void Delete(const Item& item) override { weights_.Set(item.slot, 0.0); }

  // Draws n rows at once (SumTree::DrawMany); probability = weight / total.
  void SelectMany(const double* u, int64_t n, Selection* out) const;
  const SumTree& tree() const { return weights_; }

 protected:
  virtual double Weight(const Item& item) const = 0;
  SumTree weights_;
};

class UniformSelector final : public WeightTreeSelector {
 public:
  using WeightTreeSelector::WeightTreeSelector;

 private:
  double Weight(const Item&) const override { return 1.0; }
};

class TimestepSelector final : public WeightTreeSelector {
 public:
  using WeightTreeSelector::WeightTreeSelector;

 private:
  double Weight(const Item& item) const override { return static_cast<double>(item.length); }
};

}  // namespace gearjax
