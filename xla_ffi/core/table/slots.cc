// Slots and keys (see slots.h).
#include "core/table/slots.h"

#include <bit>
#include <string>

#include "core/common.h"

namespace gearjax {

KeyLayout::KeyLayout(int64_t capacity, int key_bits)
    : slot_bits_(capacity <= 1 ? 0 : std::bit_width(static_cast<uint64_t>(capacity - 1))),
      key_bits_(key_bits) {
  if (key_bits_ > 63 || key_bits_ <= slot_bits_) {
    throw InvalidArgument("keys of " + std::to_string(key_bits_) + " bits cannot name " +
                          std::to_string(capacity) + " slots (" + std::to_string(slot_bits_) +
                          " slot bits) and count inserts; at most 63 bits");
  }
}

Slots::Slots(int64_t capacity, bool gpu_mapped, int key_bits)
    : capacity_(capacity), layout_(capacity, key_bits), info_(static_cast<size_t>(capacity), gpu_mapped) {
  free_.reserve(static_cast<size_t>(capacity));
  for (int64_t s = capacity - 1; s >= 0; --s) free_.push_back(s);
}

int64_t Slots::AcquireFree() {
  while (!free_.empty()) {
    const int64_t slot = free_.back();
    free_.pop_back();
    if (info_[slot].state == SlotState::kFree) return slot;
  }
  return -1;
}

std::vector<int64_t> Slots::FreeInOrder() const {
  std::vector<int64_t> free;
  for (int64_t slot : free_) {
    if (info_[slot].state == SlotState::kFree) free.push_back(slot);
  }
  return free;
}

}  // namespace gearjax
