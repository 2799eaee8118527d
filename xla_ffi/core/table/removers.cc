// Removers (see removers.h).
#include "core/table/removers.h"

#include "core/common.h"

namespace gearjax {

Remover CheckRemover(int64_t value) {
  if (value < 0 || value > 2) throw InvalidArgument("unknown remover " + std::to_string(value));
  return static_cast<Remover>(value);
}

int64_t ChooseVictim(Remover remover, const InsertionOrder& order, const MinPriorityHeap* heap) {
  switch (remover) {
    case Remover::kFifo: return order.Oldest();
    case Remover::kLifo: return order.Newest();
    case Remover::kMinPriority: return heap->Min();
  }
  return -1;
}

}  // namespace gearjax
