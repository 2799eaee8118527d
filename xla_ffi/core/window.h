// Window arithmetic: where a sampled window's real steps land in the output row
// and where the padding goes. Decision-transformer semantics: the window starts
// at `start`, is cut at the trajectory's end, and is padded to `width` steps on
// the chosen side. Shared by the CPU and CUDA gathers.
#pragma once

#include <cstdint>

#include "common.h"

namespace gearjax {

struct WindowPlan {
  int64_t valid;       // real steps copied: min(width, length - start)
  int64_t dst_offset;  // first output position holding a real step
};

GEARJAX_HD WindowPlan PlanWindow(int64_t length, int64_t start, int64_t width,
                                 bool pad_left) {
  const int64_t remaining = length - start;
  const int64_t valid = remaining < width ? remaining : width;
  return WindowPlan{valid, pad_left ? width - valid : 0};
}

}  // namespace gearjax
