// What a GPU selection kernel reads, at device addresses: the strategy's sum
// tree (Uniform, Timestep, Prioritized) and the per-slot records (keys,
// lengths). Table::BeginGpuSample fills it; SelectRow
// (select_block.h) consumes it.
#pragma once

#include <cstdint>

#include "slots.h"
#include "sum_tree.h"

namespace gearjax {

struct GpuSelection {
  SumTreeView tree;
  const SlotInfo* info;     // per slot: key, length
  int64_t table_size;       // trajectories stored when the sample began
};

}  // namespace gearjax
