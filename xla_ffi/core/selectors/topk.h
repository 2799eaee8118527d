// TopK(k): draws uniformly over the k highest priorities, the newer (larger
// key) first among ties, from order statistics over (priority, key).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/selectors/order_statistics.h"
#include "core/selectors/selector.h"

namespace gearjax {

// Order statistics over (priority, key): the r-th highest in O(log N).
class TopKSelector final : public SamplingSelector {
 public:
  void Insert(const Item& item) override;
  void Delete(const Item& item) override;
  bool UsesPriority() const override { return true; }
  void UpdatePriorities(const Item* before, const double* priorities, int64_t n) override;

  int64_t size() const { return static_cast<int64_t>(by_priority_.size()); }
  // Uniform over the min(k, size) highest (k >= 1; the table is not empty).
  Selection Select(double u, int64_t k) const;
  // Select for each row, with batch.count as `k`.
  void SelectMany(const SelectionBatch& batch, Selection* out) const override;
  // The best scan.count eligible items, highest priority first, the newer first among ties, weight 1.
  void ListCandidates(const CandidateScan& scan, std::vector<Weighted>* out) const override;
  // The slots of the min(k, size) highest, the highest first (what Select
  // draws from, in rank order).
  std::vector<int64_t> Highest(int64_t k) const;

 private:
  OrderStatistics<std::pair<double, int64_t>> by_priority_;  // (priority, key) -> slot
};

}  // namespace gearjax
