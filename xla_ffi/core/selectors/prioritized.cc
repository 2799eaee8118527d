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

void PrioritizedSelector::Insert(const Item& item) {
  weights_.Set(item.slot, PriorityWeight(item.priority, alpha_));
}

void PrioritizedSelector::Delete(const Item& item) { weights_.Set(item.slot, 0.0); }

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

void PrioritizedSelector::SelectMany(const double* u, int64_t n, Selection* out) const {
  drawn_.resize(static_cast<size_t>(n));
  weights_.DrawMany(u, n, drawn_.data());
  const double total = weights_.Total();
  for (int64_t i = 0; i < n; ++i) {
    out[i] = {drawn_[i], drawn_[i] < 0 ? 0.0 : weights_.Get(drawn_[i]) / total};
  }
}

}  // namespace gearjax
