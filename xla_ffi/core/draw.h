// One sampled row: the slot it reads (kept from writers by the sample's ticket
// while read; see Table::Select), the trajectory's key and length, its window
// (where it starts and how many real steps it holds: window.h), how many
// trajectories the table held when it was drawn, and the draw's probability
// (with table_size, what importance weights need). Shared by selection and the
// CPU and GPU gathers.
#pragma once

#include <cstdint>

namespace gearjax {

struct Draw {
  int64_t slot;
  int64_t key;
  int64_t length;
  int64_t start;
  int64_t valid;
  int64_t table_size;
  float probability;
};

}  // namespace gearjax
