// A priority's weight under Prioritized(alpha), in one place for the host's
// sum trees (selectors/prioritized.h) and the GPU's priority updates
// (update_block.h).
#pragma once

#include <cmath>

#include "core/common.h"
#include "core/limits.h"

namespace gearjax {

// The weight of a priority under alpha: 1 for alpha == 0 (uniform, priority 0
// included), 0 for priority 0, otherwise priority ** alpha raised to at least
// kMinWeight, so a positive priority never becomes undrawable (see limits.h,
// which also bounds priority and alpha so the weight stays finite).
// GPU priority updates (update_block.h) compute it on the device, where
// pow may differ from the host's in the last bit.
GEARJAX_HD double PriorityWeight(double priority, double alpha) {
  if (alpha == 0.0) return 1.0;
  if (priority == 0.0) return 0.0;
  const double weight = alpha == 1.0 ? priority : pow(priority, alpha);
  return weight > kMinWeight ? weight : kMinWeight;
}

}  // namespace gearjax
