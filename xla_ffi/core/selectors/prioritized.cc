// Prioritized selection (see prioritized.h).
#include "core/selectors/prioritized.h"

#include "core/selectors/priority_weight_cpu.h"

namespace gearjax {

void PrioritizedSelector::ReserveUpdates(int64_t n) {
  slots_.reserve(static_cast<size_t>(n));
  values_.reserve(static_cast<size_t>(n));
  weights_.Reserve(n);
}

void PrioritizedSelector::UpdatePriorities(const Item* before, const double* priorities,
                                           int64_t n) {
  slots_.resize(static_cast<size_t>(n));
  values_.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) slots_[i] = before[i].slot;
  PriorityWeightsCpu(priorities, alpha_, values_.data(), n);
  weights_.SetMany(slots_.data(), values_.data(), n);
}

}  // namespace gearjax
