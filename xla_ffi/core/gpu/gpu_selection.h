// What a GPU selection kernel reads, at device addresses: the live-slot bitmap
// and its fallback tree (Uniform) or the strategy's sum tree (Timestep,
// Prioritized; PrioritizedSteps' step tree, a leaf per step), and the
// per-slot records (keys, lengths). TableGpu::BeginSample fills it; SelectRow
// (select_block.h) consumes it.
#pragma once

#include <cstdint>

#include "core/selectors/sum_tree.h"
#include "core/selectors/uniform.h"
#include "core/table/slots.h"
#include "core/window.h"

namespace gearjax {

struct GpuSelection {
  bool uniform;
  UniformView live;         // Uniform
  SumTreeView tree;         // Timestep, Prioritized and PrioritizedSteps
  const SlotInfo* info;     // per slot: key, length
  int64_t capacity;         // slots in info: a descent past them is refused
  int64_t table_size;       // trajectories stored when the sample began
  Cut cut;                  // kStart or kEnd (kFull is selected on the host)
  // Leaves of `tree` a slot: 1, or max_length for PrioritizedSteps, whose
  // leaf s * max_length + t is step t of slot s, where the window is placed.
  int64_t leaves_per_slot = 1;
};

}  // namespace gearjax
