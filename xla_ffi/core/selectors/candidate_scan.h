// How selectors list a constrained sample's candidates (selector.h,
// CandidateScan): which slot records are eligible, and the slot-order walk
// the uniform and weight-tree selectors share.
#pragma once

#include <cstdint>
#include <vector>

#include "core/selectors/selector.h"
#include "core/table/slots.h"

namespace gearjax {

// Live, and long enough for cut="full" windows.
inline bool Eligible(const CandidateScan& scan, const SlotInfo& info) {
  return info.state == SlotState::kLive && info.length >= scan.full_window;
}

// Every eligible item in slot order whose weight(slot, record) is > 0.
template <typename WeightOf>
void ListInSlotOrder(const CandidateScan& scan, WeightOf weight, std::vector<Candidate>* out) {
  for (int64_t s = 0; s < scan.capacity; ++s) {
    const SlotInfo& info = scan.slots[s];
    if (!Eligible(scan, info)) continue;
    const double w = weight(s, info);
    if (w > 0) out->push_back({s, w, 0});
  }
}

}  // namespace gearjax
