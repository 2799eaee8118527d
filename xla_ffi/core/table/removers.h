// Removers: which live trajectory leaves when an insert finds the table full.
// FIFO takes the oldest key, LIFO the newest, min-priority the lowest priority
// (the oldest among ties). The choice is a query on a selector the table keeps:
// insertion order (fifo.h) or the min-priority heap (heap.h).
#pragma once

#include <cstdint>

#include "core/selectors/fifo.h"
#include "core/selectors/heap.h"

namespace gearjax {

enum class Remover : int32_t { kFifo = 0, kLifo = 1, kMinPriority = 2 };

// Throws InvalidArgument for a value outside the enum.
Remover CheckRemover(int64_t value);

// The slot the remover evicts; -1 when nothing is live. `heap` is needed
// (non-null) for kMinPriority only.
int64_t ChooseVictim(Remover remover, const InsertionOrder& order, const MinPriorityHeap* heap);

}  // namespace gearjax
