// What TopK and Recent share: order statistics over a rank (the best item
// last), draws uniform over the best `count` items (all of them when fewer
// are stored), and the best lists constrained samples and other shards read.
// Each subclass says what the rank is and keeps it up to date.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/selectors/candidate_scan.h"
#include "core/selectors/order_statistics.h"
#include "core/selectors/selector.h"

namespace gearjax {

template <typename Rank>
class RankingSelector : public SamplingSelector {
 public:
  int64_t size() const { return static_cast<int64_t>(ranked_.size()); }

  // Uniform over the min(count, size) best (count >= 1; the table is not empty).
  Selection Select(double u, int64_t count) const {
    const int64_t size = this->size(), m = std::min(count, size);
    const int64_t rank = UniformIndex(u, m);  // 0 = the best
    return {ranked_.find_by_order(size - 1 - rank)->second, 1.0 / static_cast<double>(m)};
  }

  // Select for each row, with batch.count as the count.
  void SelectMany(const SelectionBatch& batch, Selection* out) const override {
    for (int64_t b = 0; b < batch.n; ++b) out[b] = Select(batch.u[b], batch.count);
  }

  // The best scan.count eligible items, the best first, weight 1.
  void ListCandidates(const CandidateScan& scan, std::vector<Candidate>* out) const override {
    int64_t listed = 0;
    for (auto it = ranked_.rbegin(); it != ranked_.rend() && listed < scan.count; ++it) {
      if (!Eligible(scan, scan.slots[it->second])) continue;
      out->push_back({it->second, 1.0, 0});
      ++listed;
    }
  }

  // The slots of the min(count, size) best, the best first (what Select
  // draws from, in rank order).
  std::vector<int64_t> Best(int64_t count) const override {
    std::vector<int64_t> slots;
    slots.reserve(static_cast<size_t>(std::min(std::max<int64_t>(count, 0), size())));
    for (auto it = ranked_.rbegin(); it != ranked_.rend() &&
                                     static_cast<int64_t>(slots.size()) < count; ++it) {
      slots.push_back(it->second);
    }
    return slots;
  }

 protected:
  OrderStatistics<Rank> ranked_;  // rank -> slot, the best last
};

}  // namespace gearjax
