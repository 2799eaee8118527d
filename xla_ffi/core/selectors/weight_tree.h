// Selection in proportion to a weight per live item, kept in a sum tree (see
// sum_tree.h): the base of Timestep (weight = length, uniform.h) and
// Prioritized (weight = priority ** alpha, prioritized.h).
#pragma once

#include <cstdint>
#include <vector>

#include "core/sum_tree.h"
#include "core/selectors/selector.h"

namespace gearjax {

class WeightTreeSelector : public Selector {
 public:
  WeightTreeSelector(int64_t capacity, bool gpu_mapped) : weights_(capacity, gpu_mapped) {}
  void Insert(const Item& item) override { weights_.Set(item.slot, Weight(item)); }
  void Delete(const Item& item) override { weights_.Set(item.slot, 0.0); }

  // Draws n rows at once (SumTree::DrawMany, prefetching `then` for each
  // drawn slot); probability = weight / total.
  void SelectMany(const double* u, int64_t n, Selection* out, LeafPrefetch then = {}) const {
    drawn_.resize(static_cast<size_t>(n));
    weights_.DrawMany(u, n, drawn_.data(), then);
    const double total = weights_.Total();
    for (int64_t i = 0; i < n; ++i) {
      out[i] = {drawn_[i], drawn_[i] < 0 ? 0.0 : weights_.Get(drawn_[i]) / total};
    }
  }
  double Total() const { return weights_.Total(); }
  const SumTree& tree() const { return weights_; }

 protected:
  virtual double Weight(const Item& item) const = 0;
  SumTree weights_;

 private:
  mutable std::vector<int64_t> drawn_;  // SelectMany's scratch (callers hold the table's lock)
};

}  // namespace gearjax
