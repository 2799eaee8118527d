// GPU-side selection for Uniform, Timestep and Prioritized, written once for
// nvcc and the host compiler: row b expands the device-resident seed with
// Philox, draws a slot (uniform.h's rejection draw for Uniform, a sum-tree
// descent otherwise) and reads the slot's key and length. It computes
// exactly what Table::Select computes on the host for the same seed and the
// same table state, so the CPU emulator (xla_ffi/testing) checks it against
// the CPU handler bit for bit.
#pragma once

#include <cstdint>

#include "common.h"
#include "draw.h"
#include "gpu_selection.h"
#include "random.h"
#include "sum_tree.h"
#include "window.h"

namespace gearjax {

GEARJAX_HD Draw SelectRow(const GpuSelection& s, const uint32_t seed[2], int64_t window,
                          int64_t b) {
  const Words4 words = RowWords(seed, b);
  const double u = UniformFromBits(words.w[0], words.w[1]);
  Draw d;
  if (s.uniform) {
    d.slot = UniformDraw(s.live, seed, b, u);
    d.probability = static_cast<float>(1.0 / static_cast<double>(s.table_size));
  } else {
    d.slot = SumTreeDraw(s.tree, u);
    d.probability = d.slot < 0 ? 0.0f
                               : static_cast<float>(SumTreeWeight(s.tree, d.slot) /
                                                    SumTreeTotal(s.tree));
  }
  // A tree read while the host changes it may yield no leaf (see SumTreeDraw);
  // the row then reads slot 0's record and reports probability 0.
  const SlotInfo& info = s.info[d.slot < 0 ? 0 : d.slot];
  d.key = info.key;
  d.length = info.length;
  d.table_size = s.table_size;
  const WindowCut cut = CutWindow(s.cut, d.length, window, words.w[2], words.w[3]);
  d.start = cut.start;
  d.valid = cut.valid;
  if (d.slot < 0) d.slot = 0;
  return d;
}

}  // namespace gearjax
