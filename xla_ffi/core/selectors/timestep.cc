// Timestep() (see timestep.h).
#include "core/selectors/timestep.h"

#include "core/selectors/candidate_scan.h"

namespace gearjax {

void TimestepSelector::ListCandidates(const CandidateScan& scan,
                                      std::vector<Candidate>* out) const {
  const int64_t w = scan.full_window;
  ListInSlotOrder(scan, [w](int64_t, const SlotInfo& info) {
    return static_cast<double>(w > 0 ? info.length - w + 1 : info.length);
  }, out);
}

}  // namespace gearjax
