// The fused GPU sample, written once for nvcc and the host compiler: one block
// per row selects the row (SelectRow, select_block.h: one thread) and copies
// all of it (GatherRow, gather_block.h: every thread), so a Uniform, Timestep
// or Prioritized sample is one kernel launch and needs no scratch memory for
// its draws. One selection per row, shared by the block, keeps every column of
// a row from the same draw while the host changes the selection state.
//
// Used where every column's window fits one gather part (FusesSample): there
// the separate gather would run one block per row and column anyway. Wider
// rows keep the select and gather kernels, whose grid splits each row.
#pragma once

#include <cstdint>

#include "core/gpu/gather_block.h"
#include "core/gpu/gpu_selection.h"
#include "core/gpu/select_block.h"

namespace gearjax {

inline bool FusesSample(const GatherParams& p) { return GatherParts(p) == 1; }

// Row b's draw, as the fused kernel's thread 0 makes it.
GEARJAX_HD Draw FusedRowDraw(const GpuSelection& s, const uint32_t* seed, int64_t window,
                             int64_t b) {
  const uint32_t words[2] = {seed[0], seed[1]};
  return SelectRow(s, words, window, b);
}

// The fused kernel's work on the CPU, block by block and thread by thread,
// each block reporting itself done (CompleteBlock) as the kernel's do.
inline void EmulateFusedSample(const GpuSelection& s, const uint32_t seed[2], int64_t window,
                               const GatherParams& p, int64_t threads) {
  for (int64_t b = 0; b < p.batch; ++b) {
    const Draw d = FusedRowDraw(s, seed, window, b);
    for (int64_t t = 0; t < threads; ++t) GatherRow(p, d, b, t, threads);
    CompleteBlock(p.completion, static_cast<uint64_t>(p.batch));
  }
}

}  // namespace gearjax
