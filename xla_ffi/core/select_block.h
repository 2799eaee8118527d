// GPU-side selection for the sum-tree strategies (Uniform, Timestep,
// Prioritized), written once for nvcc and the host compiler: row b expands the
// device-resident seed with Philox, descends the strategy's sum tree and reads
// the slot's key and length. It computes exactly what Table::Select computes
// on the host for the same seed and the same table state, so the CPU emulator
// (module.cc) checks it against the CPU handler bit for bit.
#pragma once

#include <cstdint>

#include "common.h"
#include "draw.h"
#include "random.h"
#include "sum_tree.h"
#include "table.h"

namespace gearjax {

GEARJAX_HD Draw SelectRow(const GpuSelection& s, const uint32_t seed[2], int64_t window,
                          int64_t b) {
  const Words4 words = RowWords(seed, b);
  Draw d;
  d.slot = SumTreeDraw(s.nodes, s.leaves, UniformFromBits(words.w[0], words.w[1]));
  d.key = s.keys[d.slot];
  d.length = s.lengths[d.slot];
  d.table_size = s.table_size;
  d.probability = static_cast<float>(s.nodes[s.leaves + d.slot] / s.nodes[1]);
  d.start = window == 0 ? 0 : static_cast<int64_t>(BelowFromBits(words.w[2], words.w[3], d.length));
  return d;
}

}  // namespace gearjax
