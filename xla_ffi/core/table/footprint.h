// What a table holds in host memory besides its arena, at its worst: the
// construction check (gearjax/table.py) counts it, with the arena, against
// the machine's memory, so a table that could not hold what its own calls
// build is refused when it is made rather than killed for memory later.
//
// "At its worst" is every structure the table may build and the scratch its
// calls keep: the slot records and per-slot state; the insertion order; the
// Uniform selector; the Timestep tree; kMaxPriorityTrees Prioritized trees,
// each with the scratch of an update of every key; the TopK and Recent
// rankings; the remover's heap (min_priority); a constrained sample listing
// every item (its candidates and the tree it draws from); and the item lists
// of a checkpoint, as a call's results too. Calls over more keys than the
// table has slots (an update naming keys twice) keep scratch in proportion
// to their input, which their caller already holds.
#pragma once

#include <cstdint>

#include "core/table/removers.h"

namespace gearjax {

// Bytes of bookkeeping at its worst, for a table of `capacity` slots of at
// most `max_length` steps with `remover`, keeping a priority per step or not.
int64_t WorstBookkeepingBytes(int64_t capacity, int64_t max_length, Remover remover,
                              bool step_priorities = false);

}  // namespace gearjax
