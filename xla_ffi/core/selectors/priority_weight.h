// A priority's weight under Prioritized(alpha), in one place for the host's
// sum trees (selectors/prioritized.h) and the GPU's priority updates
// (update_block.h).
#pragma once

#include <cmath>

#include "core/common.h"
#include "core/limits.h"
#include "core/selectors/priority_weight_cpu.h"

namespace gearjax {

// The weight of a priority under alpha: 1 for alpha == 0 (uniform, priority 0
// included), 0 for priority 0, otherwise priority ** alpha raised to at least
// kMinWeight, so a positive priority never becomes undrawable (see limits.h,
// which also bounds priority and alpha so the weight stays finite).
// On the host, the power is PriorityPowCpu's (priority_weight_cpu.h), whose
// batched kernels (PriorityWeightsCpu) give the same bits; GPU priority
// updates (update_block.h) compute it on the device with CUDA's pow, which
// may differ from the host's in the last bits.
GEARJAX_HD double PriorityWeight(double priority, double alpha) {
  if (alpha == 0.0) return 1.0;
  if (priority == 0.0) return 0.0;
#if defined(__CUDA_ARCH__)
  const double weight = alpha == 1.0 ? priority : pow(priority, alpha);
#else
  const double weight = alpha == 1.0 ? priority : PriorityPowCpu(priority, alpha);
#endif
  return weight > kMinWeight ? weight : kMinWeight;
}

}  // namespace gearjax
