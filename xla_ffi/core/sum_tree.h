// A float64 sum tree over table slots: O(log N) weight updates and weighted
// draws. Parents are recomputed from their children on every update instead of
// accumulating deltas, so sums never drift however many updates are applied.
#pragma once

#include <cstdint>
#include <vector>

namespace gearjax {

class SumTree {
 public:
  explicit SumTree(int64_t num_leaves) {
    leaves_ = 1;
    while (leaves_ < num_leaves) leaves_ <<= 1;
    nodes_.assign(2 * leaves_, 0.0);
  }

  void Set(int64_t leaf, double weight) {
    int64_t node = leaves_ + leaf;
    nodes_[node] = weight;
    for (node >>= 1; node >= 1; node >>= 1) {
      nodes_[node] = nodes_[2 * node] + nodes_[2 * node + 1];
    }
  }

  double Get(int64_t leaf) const { return nodes_[leaves_ + leaf]; }
  double Total() const { return nodes_[1]; }

  // The leaf whose cumulative-weight interval holds u * Total(), u in [0, 1).
  // Never returns a zero-weight leaf: at each level it only descends into a
  // child with positive weight, even when rounding pushes the target past it.
  // Requires Total() > 0.
  int64_t Draw(double u) const {
    double target = u * nodes_[1];
    int64_t node = 1;
    while (node < leaves_) {
      const double left = nodes_[2 * node];
      const double right = nodes_[2 * node + 1];
      if (target < left || right <= 0.0) {
        node = 2 * node;
      } else {
        target -= left;
        node = 2 * node + 1;
      }
    }
    return node - leaves_;
  }

 private:
  int64_t leaves_;
  std::vector<double> nodes_;
};

}  // namespace gearjax
