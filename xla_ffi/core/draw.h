// One sampled row: the slot it reads (pinned while read), the trajectory's key
// and length, where the window starts, and the draw's probability. Shared by
// the table's selection and the CPU and GPU gathers.
#pragma once

#include <cstdint>

namespace gearjax {

struct Draw {
  int64_t slot;
  int64_t key;
  int64_t length;
  int64_t start;
  float probability;
};

}  // namespace gearjax
