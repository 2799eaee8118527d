// Recent(n) (see recent.h).
#include "core/selectors/recent.h"

#include <algorithm>

#include "core/selectors/candidate_scan.h"

namespace gearjax {

void RecentSelector::Insert(const Item& item) { by_key_.insert({item.key, item.slot}); }

void RecentSelector::Delete(const Item& item) { by_key_.erase(item.key); }

Selection RecentSelector::Select(double u, int64_t n) const {
  const int64_t size = this->size(), m = std::min(n, size);
  const int64_t rank = UniformIndex(u, m);  // 0 = the newest
  return {by_key_.find_by_order(size - 1 - rank)->second, 1.0 / static_cast<double>(m)};
}

void RecentSelector::SelectMany(const SelectionBatch& batch, Selection* out) const {
  for (int64_t b = 0; b < batch.n; ++b) out[b] = Select(batch.u[b], batch.count);
}

std::vector<int64_t> RecentSelector::Newest(int64_t n) const {
  std::vector<int64_t> slots;
  slots.reserve(static_cast<size_t>(std::min(std::max<int64_t>(n, 0), size())));
  for (auto it = by_key_.rbegin(); it != by_key_.rend() &&
                                   static_cast<int64_t>(slots.size()) < n; ++it) {
    slots.push_back(it->second);
  }
  return slots;
}

void RecentSelector::ListCandidates(const CandidateScan& scan, std::vector<Weighted>* out) const {
  int64_t listed = 0;
  for (auto it = by_key_.rbegin(); it != by_key_.rend() && listed < scan.count; ++it) {
    if (!Eligible(scan, scan.slots[it->second])) continue;
    out->push_back({it->second, 1.0});
    ++listed;
  }
}

}  // namespace gearjax
