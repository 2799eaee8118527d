// GPU-side selection for Uniform, Timestep, Prioritized and PrioritizedSteps,
// written once for nvcc and the host compiler: row b expands the
// device-resident seed with Philox, draws a slot (uniform.h's rejection draw
// for Uniform, a sum-tree descent otherwise: to a step of a slot for
// PrioritizedSteps, where its window is placed), validates it, and reads the
// slot's key and length (state first: ReadLiveRecord). It computes
// exactly what Table::Select computes on the host for the same seed and the
// same table state, so the CPU emulator (xla_ffi/testing) checks it against
// the CPU handler bit for bit.
#pragma once

#include <cstdint>

#include "core/common.h"
#include "core/draw.h"
#include "core/gpu/gpu_selection.h"
#include "core/gpu/live_record.h"
#include "core/random.h"
#include "core/selectors/sum_tree.h"
#include "core/window.h"

namespace gearjax {

// Redraws of a row whose draw fails validation (see SelectRow); their words
// come from RedrawRow (random.h).
inline constexpr uint32_t kGpuRedraws = 8;

// A live slot's key and length as the kernel uses them.
struct LiveRecord {
  int64_t key;
  int64_t length;
};

// Reads a slot's record if its state says live (else false), state first
// (live_record.h). The key and length of a record live when read are not
// rewritten until the sample ends (an eviction meanwhile changes the state
// only; the slot is written again after the sample's ticket is back,
// Table::EndSample).
GEARJAX_HD bool ReadLiveRecord(const SlotInfo& info, LiveRecord* out) {
  if (!LoadLiveState(info)) return false;
  out->key = LoadRecordField(info.key);
  out->length = LoadRecordField(info.length);
  return true;
}

// Whether a drawn leaf (a slot; for PrioritizedSteps a step of a slot) may be
// returned, with its slot's record: a live slot (its record says so), a step
// it holds, and, for the tree strategies, a positive weight in the tree as
// the kernel reads it now.
GEARJAX_HD bool DrawIsValid(const GpuSelection& s, int64_t leaf, LiveRecord* record) {
  // A tree's padding leaves lie past the slots: a descent through nodes not
  // yet written (a torn read) can end there.
  if (leaf < 0 || leaf >= s.capacity * s.leaves_per_slot) return false;
  const int64_t slot = leaf / s.leaves_per_slot;
  if (!ReadLiveRecord(s.info[slot], record)) return false;
  if (leaf % s.leaves_per_slot >= record->length) return false;
  return s.uniform || SumTreeWeight(s.tree, leaf) > 0.0;
}

// Row b. The kernel reads the selection state in mapped host memory while the
// host may change it (inserts, evictions, priority updates): a descent can
// end on a leaf just set to zero, or on a slot that has just left. So every
// draw is validated (DrawIsValid) and a failed one is drawn again with fresh
// words, up to kGpuRedraws times: a zero-priority, free or half-written slot
// is never returned. A row whose every draw fails (the table emptied while
// the kernel ran) comes back empty: key -1, no real steps, probability
// 1 / table_size (so an importance weight stays finite; the mask is all
// False). With a state that does not change, the first draw is valid and the
// row is exactly what Table::Select draws on the host.
GEARJAX_HD Draw SelectRow(const GpuSelection& s, const uint32_t seed[2], int64_t window,
                          int64_t b) {
  const Words4 words = RowWords(seed, b);
  Draw d;
  d.table_size = s.table_size;
  d.slot = -1;
  int64_t step = -1;  // PrioritizedSteps: the drawn step, where the window goes
  LiveRecord record{-1, 0};
  for (uint32_t redraw = 0; redraw <= kGpuRedraws; ++redraw) {
    const int64_t row = RedrawRow(b, redraw);
    const Words4 w = redraw == 0 ? words : RowWords(seed, row);
    const double u = UniformFromBits(w.w[0], w.w[1]);
    const int64_t leaf = s.uniform ? UniformDraw(s.live, seed, row, u) : SumTreeDraw(s.tree, u);
    if (!DrawIsValid(s, leaf, &record)) continue;
    d.slot = leaf / s.leaves_per_slot;
    if (s.leaves_per_slot > 1) step = leaf % s.leaves_per_slot;
    d.probability = s.uniform ? static_cast<float>(1.0 / static_cast<double>(s.table_size))
                              : static_cast<float>(SumTreeWeight(s.tree, leaf) /
                                                   SumTreeTotal(s.tree));
    break;
  }
  if (d.slot < 0) {
    d.slot = 0;  // read by nobody: the window below is empty
    d.key = -1;
    d.length = 0;
    d.start = 0;
    d.valid = 0;
    d.probability = s.table_size > 0 ? static_cast<float>(1.0 / static_cast<double>(
                                           s.table_size))
                                     : 1.0f;
    return d;
  }
  d.key = record.key;
  d.length = record.length;
  const WindowCut cut = step >= 0 ? WindowAtStep(s.cut, d.length, window, step)
                                  : CutWindow(s.cut, d.length, window, words.w[2], words.w[3]);
  d.start = cut.start;
  d.valid = cut.valid;
  return d;
}

}  // namespace gearjax
