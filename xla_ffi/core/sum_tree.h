// A float64 sum tree over table slots: O(log N) weight updates and weighted
// draws. Parents are recomputed from their children on every update instead of
// accumulating deltas, so sums never drift however many updates are applied.
// The nodes can live in GPU-mapped pinned memory so that GPU kernels draw from
// the very same tree (SumTreeDraw is host/device code).
#pragma once

#include <cstdint>

#include "common.h"
#include "mapped_array.h"

namespace gearjax {

// The leaf whose cumulative-weight interval holds u * total, u in [0, 1), for
// a tree of `leaves` leaves stored as nodes[1 .. 2 * leaves). Never returns a
// zero-weight leaf: at each level it only descends into a child with positive
// weight, even when rounding (or a concurrent update) pushes the target past
// it. Requires nodes[1] > 0.
GEARJAX_HD int64_t SumTreeDraw(const double* nodes, int64_t leaves, double u) {
  double target = u * nodes[1];
  int64_t node = 1;
  while (node < leaves) {
    const double left = nodes[2 * node];
    const double right = nodes[2 * node + 1];
    if (target < left || right <= 0.0) {
      node = 2 * node;
    } else {
      target -= left;
      node = 2 * node + 1;
    }
  }
  return node - leaves;
}

class SumTree {
 public:
  SumTree(int64_t num_leaves, bool gpu_mapped) : leaves_(RoundUpPow2(num_leaves)),
                                                 nodes_(2 * leaves_, gpu_mapped) {}

  void Set(int64_t leaf, double weight) {
    int64_t node = leaves_ + leaf;
    nodes_[node] = weight;
    for (node >>= 1; node >= 1; node >>= 1) {
      nodes_[node] = nodes_[2 * node] + nodes_[2 * node + 1];
    }
  }

  double Get(int64_t leaf) const { return nodes_[leaves_ + leaf]; }
  double Total() const { return nodes_[1]; }
  int64_t Draw(double u) const { return SumTreeDraw(nodes_.data(), leaves_, u); }

  int64_t leaves() const { return leaves_; }
  const double* device_nodes() const { return nodes_.device_data(); }

 private:
  static int64_t RoundUpPow2(int64_t n) {
    int64_t p = 1;
    while (p < n) p <<= 1;
    return p;
  }

  int64_t leaves_;
  MappedArray<double> nodes_;
};

}  // namespace gearjax
