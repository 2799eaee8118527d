// How a table is made: its columns, capacity, remover, rate limiter, where
// its memory lives and its per-trajectory limits (Table's constructor checks
// it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rate_limiter.h"
#include "removers.h"
#include "storage.h"

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
  int key_bits = 63;        // keys stay below 2^key_bits (see slots.h)
  // A trajectory leaves after this many draws (consume-once at 1); 0: never.
  int64_t max_times_sampled = 0;
  // How long an insert waits for the samples and readers still reading the
  // slot it took before it fails with Timeout (they finish in microseconds
  // unless a GPU stream stalls).
  double slot_wait_seconds = 60.0;
};

}  // namespace gearjax
