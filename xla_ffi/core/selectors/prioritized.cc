// Prioritized selection (see prioritized.h).
#include "core/selectors/prioritized.h"

namespace gearjax {

void PrioritizedSelector::UpdatePriorities(const Item* before, const double* priorities,
                                           int64_t n) {
  slots_.resize(static_cast<size_t>(n));
  values_.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    slots_[i] = before[i].slot;
    values_[i] = PriorityWeight(priorities[i], alpha_);
  }
  weights_.SetMany(slots_.data(), values_.data(), n);
}

}  // namespace gearjax
