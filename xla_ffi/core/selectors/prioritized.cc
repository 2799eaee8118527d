// Prioritized selection (see prioritized.h).
#include "core/selectors/prioritized.h"

#include <algorithm>
#include <cmath>

#include "core/limits.h"

namespace gearjax {

double PriorityWeight(double priority, double alpha) {
  if (alpha == 0.0) return 1.0;
  if (priority == 0.0) return 0.0;
  const double weight = alpha == 1.0 ? priority : std::pow(priority, alpha);
  return std::max(weight, kMinWeight);
}

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
