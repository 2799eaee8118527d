// Recent(n): draws uniformly over the n newest items (the n largest keys),
// from order statistics over keys.
#pragma once

#include <cstdint>
#include <vector>

#include "core/selectors/order_statistics.h"
#include "core/selectors/selector.h"

namespace gearjax {

// Order statistics over keys: the r-th newest item in O(log N).
class RecentSelector final : public SamplingSelector {
 public:
  void Insert(const Item& item) override;
  void Delete(const Item& item) override;

  int64_t size() const { return static_cast<int64_t>(by_key_.size()); }
  // Uniform over the min(n, size) newest items (n >= 1; the table is not empty).
  Selection Select(double u, int64_t n) const;
  // Select for each row, with batch.count as `n`.
  void SelectMany(const SelectionBatch& batch, Selection* out) const override;
  // The best scan.count eligible items, newest first, weight 1.
  void ListCandidates(const CandidateScan& scan, std::vector<Weighted>* out) const override;
  // The slots of the min(n, size) newest, the newest first.
  std::vector<int64_t> Newest(int64_t n) const;

 private:
  OrderStatistics<int64_t> by_key_;  // key -> slot
};

}  // namespace gearjax
