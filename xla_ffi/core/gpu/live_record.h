// A slot's record read by a kernel (and by the CPU emulator) while the host
// may publish or evict it: the state first, with acquire, then the fields.
// The host publishes a record as Table::PublishLocked does (key and length,
// then the state with release), so a live state read this way is never paired
// with the key or length of the item the slot held before. Shared by the
// selection (select_block.h) and the priority update (update_block.h).
#pragma once

#include <cstdint>

#include "core/common.h"
#include "core/table/slots.h"

namespace gearjax {

// Whether the record's state says live, loaded with acquire: the loads of
// its fields that follow (LoadRecordField) are ordered after it.
GEARJAX_HD bool LoadLiveState(const SlotInfo& info) {
#ifdef __CUDA_ARCH__
  const SlotState state = *reinterpret_cast<const volatile SlotState*>(&info.state);
  __threadfence_system();  // the state's load before the fields'
  return state == SlotState::kLive;
#else
  const auto* state = reinterpret_cast<const uint8_t*>(&info.state);
  return __atomic_load_n(state, __ATOMIC_ACQUIRE) == static_cast<uint8_t>(SlotState::kLive);
#endif
}

// A record's field (key or length), after LoadLiveState.
GEARJAX_HD int64_t LoadRecordField(const int64_t& field) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const volatile int64_t*>(&field);
#else
  return __atomic_load_n(&field, __ATOMIC_RELAXED);
#endif
}

}  // namespace gearjax
