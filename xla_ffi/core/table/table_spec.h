// How a table is made: its columns, capacity, remover, rate limiter, where
// its memory lives and its per-trajectory limits (Table's constructor checks
// it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/table/rate_limiter.h"
#include "core/table/removers.h"
#include "core/table/storage.h"

namespace gearjax {

struct TableSpec {
  std::string name;  // for error messages; may be empty
  std::vector<ColumnSpec> columns;
  int64_t capacity = 0;
  int64_t max_length = 0;
  Remover remover = Remover::kFifo;
  RateLimiterSpec limiter;
  bool gpu_mapped = false;  // ask for GPU-mapped pinned memory (see memory.h)
  bool on_device = false;   // keep the arena in GPU memory (needs DeviceMemory hooks)
  int device = -1;          // its GPU (< 0: the creating thread's current one)
  int key_bits = 63;        // keys stay below 2^key_bits (see slots.h)
  // A trajectory leaves after this many draws (consume-once at 1); 0: never.
  int64_t max_times_sampled = 0;
  // How long a call waits for GPU work before it fails with Timeout: an
  // insert for the samples and readers still reading the slot it took, a
  // reader or writer of the priorities for a GPU priority update, an update
  // for another stream's, a GPU sample for the one GpuCompletions::kSize
  // samples before it (they finish in microseconds to milliseconds unless a
  // GPU stream stalls or failed).
  double slot_wait_seconds = 60.0;
  // Keep a priority per step as well (PrioritizedSteps draws by them; a
  // trajectory's own priority is then the largest of its steps'):
  // 8 bytes a step of capacity * max_length.
  bool step_priorities = false;
};

}  // namespace gearjax
