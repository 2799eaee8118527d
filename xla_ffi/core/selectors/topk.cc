// TopK(k) (see topk.h).
#include "core/selectors/topk.h"

#include <algorithm>

#include "core/selectors/candidate_scan.h"

namespace gearjax {

void TopKSelector::Insert(const Item& item) {
  by_priority_.insert({{item.priority, item.key}, item.slot});
}

void TopKSelector::Delete(const Item& item) { by_priority_.erase({item.priority, item.key}); }

void TopKSelector::UpdatePriorities(const Item* before, const double* priorities, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    by_priority_.erase({before[i].priority, before[i].key});
    by_priority_.insert({{priorities[i], before[i].key}, before[i].slot});
  }
}

Selection TopKSelector::Select(double u, int64_t k) const {
  const int64_t size = this->size(), m = std::min(k, size);
  const int64_t rank = UniformIndex(u, m);  // 0 = the highest
  return {by_priority_.find_by_order(size - 1 - rank)->second, 1.0 / static_cast<double>(m)};
}

void TopKSelector::SelectMany(const SelectionBatch& batch, Selection* out) const {
  for (int64_t b = 0; b < batch.n; ++b) out[b] = Select(batch.u[b], batch.count);
}

std::vector<int64_t> TopKSelector::Highest(int64_t k) const {
  std::vector<int64_t> slots;
  slots.reserve(static_cast<size_t>(std::min(std::max<int64_t>(k, 0), size())));
  for (auto it = by_priority_.rbegin(); it != by_priority_.rend() &&
                                        static_cast<int64_t>(slots.size()) < k; ++it) {
    slots.push_back(it->second);
  }
  return slots;
}

void TopKSelector::ListCandidates(const CandidateScan& scan, std::vector<Weighted>* out) const {
  int64_t listed = 0;
  for (auto it = by_priority_.rbegin(); it != by_priority_.rend() && listed < scan.count; ++it) {
    if (!Eligible(scan, scan.slots[it->second])) continue;
    out->push_back({it->second, 1.0});
    ++listed;
  }
}

}  // namespace gearjax
