// Slots and keys. A table has `capacity` slots; each holds at most one
// trajectory and goes free -> writing -> live -> (evicted: writing) -> live...
// A slot's record (key, length, priority, pins, state) is one 32-byte entry in
// an array GPU kernels can read, so a sampled row costs one cache line of
// bookkeeping.
//
// Keys: key = sequence << slot_bits | slot, where sequence counts the
// trajectories published so far (0, 1, 2, ...) and slot_bits is the fewest
// bits that hold every slot number. So keys are unique, increase with
// publication order and are never reused, and a key names its slot directly:
// looking one up is a read of that slot's record (is it live, and is it still
// this key?), with no index to search or maintain. A table may be given fewer
// than 63 key bits (`key_bits`): the shards of a sharded table keep the top
// bits of a global key for the shard's number (gearjax/sharded).
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "core/gpu/mapped_array.h"

namespace gearjax {

enum class SlotState : uint8_t { kFree = 0, kWriting = 1, kLive = 2 };

struct SlotInfo {
  int64_t key;       // the key of the trajectory the slot holds or last held
  int64_t length;    // its length in steps
  double priority;   // its priority
  int32_t pins;      // samplers and readers copying from it now
  SlotState state;
};
static_assert(sizeof(SlotInfo) == 32);

class KeyLayout {
 public:
  // Keys of `key_bits` bits (slot bits included), in [slot_bits + 1, 63].
  explicit KeyLayout(int64_t capacity, int key_bits = 63);
  int slot_bits() const { return slot_bits_; }
  int key_bits() const { return key_bits_; }
  // The largest sequence number a key can carry (keys are non-negative and
  // below 2^key_bits).
  int64_t max_sequence() const {
    return static_cast<int64_t>((uint64_t{1} << key_bits_) - 1) >> slot_bits_;
  }
  int64_t Key(int64_t sequence, int64_t slot) const { return (sequence << slot_bits_) | slot; }
  int64_t Slot(int64_t key) const { return key & ((int64_t{1} << slot_bits_) - 1); }
  int64_t Sequence(int64_t key) const { return key >> slot_bits_; }

 private:
  int slot_bits_;
  int key_bits_;
};

class Slots {
 public:
  Slots(int64_t capacity, bool gpu_mapped, int key_bits = 63);

  int64_t capacity() const { return capacity_; }
  const KeyLayout& layout() const { return layout_; }
  SlotInfo& operator[](int64_t slot) { return info_[slot]; }
  const SlotInfo& operator[](int64_t slot) const { return info_[slot]; }
  // The records at the GPU's addresses (nullptr when not GPU-mapped).
  const SlotInfo* device_info() const { return info_.device_data(); }
  // Where a key would live (no memory access), for prefetching.
  const SlotInfo* Address(int64_t key) const {
    const int64_t slot = layout_.Slot(key);
    return slot < capacity_ ? &info_[slot] : nullptr;
  }

  // The slot holding live key `key`, or -1 (never stored, evicted, or not a
  // key of this table).
  int64_t Find(int64_t key) const {
    if (key < 0) return -1;
    const int64_t slot = layout_.Slot(key);
    if (slot >= capacity_) return -1;
    const SlotInfo& info = info_[slot];
    return info.state == SlotState::kLive && info.key == key ? slot : -1;
  }

  // Pins: a pinned slot is not overwritten (writers wait for its pins).
  void Pin(int64_t slot) {
    if (info_[slot].pins++ == 0) ++pinned_;
  }
  void Unpin(int64_t slot) {
    if (--info_[slot].pins == 0) --pinned_;
  }
  int64_t pinned() const { return pinned_; }

  // Free slots, handed out lowest first. Restores may take a slot out of
  // order; its entry stays behind and Acquire skips it.
  int64_t AcquireFree();  // a free slot, or -1
  void ReleaseFree(int64_t slot) { free_.push_back(slot); }
  // The free slots as kept (Acquire takes them from the back).
  std::vector<int64_t> FreeInOrder() const;
  void SetFree(const std::vector<int64_t>& free) { free_ = free; }

 private:
  int64_t capacity_;
  KeyLayout layout_;
  MappedArray<SlotInfo> info_;
  std::vector<int64_t> free_;  // popped from the back
  int64_t pinned_ = 0;
};

}  // namespace gearjax
