// A GPU sample's kernel reporting itself done (see gpu_completions.h for the
// protocol): the view it reports through, and what each of its blocks does at
// its end. Written once for nvcc and the host compiler (the CPU emulator runs
// it: gather_plan.h), like gather_block.h.
#pragma once

#include <cstdint>

#include "core/common.h"

namespace gearjax {

// What a kernel needs to report ticket `ticket` done (device addresses).
// done == nullptr: nothing to report (the CPU handler's gathers, emulations
// that return their tickets by hand).
struct CompletionView {
  uint64_t* done = nullptr;    // [size], GPU-mapped pinned host memory
  uint32_t* blocks = nullptr;  // [size], GPU memory (host memory where emulated)
  uint64_t ticket = 0;
  uint64_t size = 0;
};

// Called by one thread of each of a kernel's `total` blocks once the block's
// threads have all finished reading the table (after a block barrier): counts
// the block, and the last one writes the ticket where the host looks.
GEARJAX_HD void CompleteBlock(const CompletionView& c, uint64_t total) {
  if (c.done == nullptr) return;
  const uint64_t place = c.ticket % c.size;
#ifdef __CUDA_ARCH__
  __threadfence();  // this block's work before its count, for the last block
  const unsigned before = atomicAdd(&c.blocks[place], 1u);
  if (before + 1 != total) return;
  __threadfence();  // every block's count (and work) before the reset and the report
  c.blocks[place] = 0;  // the place's next ticket starts from 0 (a later kernel)
  __threadfence_system();
  *reinterpret_cast<volatile unsigned long long*>(&c.done[place]) = c.ticket;
#else
  const uint32_t before = __atomic_fetch_add(&c.blocks[place], 1u, __ATOMIC_ACQ_REL);
  if (before + 1 != total) return;
  __atomic_store_n(&c.blocks[place], 0u, __ATOMIC_RELAXED);
  __atomic_store_n(&c.done[place], c.ticket, __ATOMIC_RELEASE);
#endif
}

}  // namespace gearjax
