// Tests of keys (layout, lookup with the generation check) and slot records.
#include "core/table/slots.h"

#include <gtest/gtest.h>

#include <limits>

namespace gearjax {
namespace {

TEST(KeyLayout, UsesTheFewestBitsThatHoldEverySlot) {
  EXPECT_EQ(KeyLayout(1).slot_bits(), 0);
  EXPECT_EQ(KeyLayout(2).slot_bits(), 1);
  EXPECT_EQ(KeyLayout(3).slot_bits(), 2);
  EXPECT_EQ(KeyLayout(1024).slot_bits(), 10);
  EXPECT_EQ(KeyLayout(1025).slot_bits(), 11);
  EXPECT_EQ(KeyLayout(int64_t{1} << 31).slot_bits(), 31);
  EXPECT_EQ(KeyLayout(int64_t{1} << 31).max_sequence(), (int64_t{1} << 32) - 1);
  EXPECT_EQ(KeyLayout(1).max_sequence(), std::numeric_limits<int64_t>::max());
  const KeyLayout layout(1000);
  for (int64_t sequence : {int64_t{0}, int64_t{1}, layout.max_sequence()}) {
    for (int64_t slot : {0, 1, 999}) {
      const int64_t key = layout.Key(sequence, slot);
      EXPECT_GE(key, 0);
      EXPECT_EQ(layout.Slot(key), slot);
      EXPECT_EQ(layout.Sequence(key), sequence);
    }
  }
  // Keys increase with the sequence whatever the slot.
  EXPECT_LT(layout.Key(5, 999), layout.Key(6, 0));
}

TEST(Slots, FindOnlyLiveKeysOfTheirCurrentGeneration) {
  Slots slots(10, false);
  const int64_t key = slots.layout().Key(3, 7);
  slots[7] = {key, 4, 1.0, 0, SlotState::kLive};
  EXPECT_EQ(slots.Find(key), 7);
  EXPECT_EQ(slots.Find(slots.layout().Key(2, 7)), -1);   // an older occupant
  EXPECT_EQ(slots.Find(slots.layout().Key(3, 8)), -1);   // an empty slot
  EXPECT_EQ(slots.Find(slots.layout().Key(0, 15)), -1);  // beyond capacity
  EXPECT_EQ(slots.Find(-5), -1);
  slots[7].state = SlotState::kWriting;                  // evicted, being rewritten
  EXPECT_EQ(slots.Find(key), -1);
}

TEST(Slots, HandOutFreeSlotsLowestFirstAndCountPins) {
  Slots slots(3, false);
  EXPECT_EQ(slots.AcquireFree(), 0);
  slots[0].state = SlotState::kLive;
  EXPECT_EQ(slots.AcquireFree(), 1);
  slots[1].state = SlotState::kLive;
  slots.ReleaseFree(1);  // stale: the slot is live
  EXPECT_EQ(slots.AcquireFree(), 2);
  slots[2].state = SlotState::kLive;
  EXPECT_EQ(slots.AcquireFree(), -1);
  slots.Pin(0);
  slots.Pin(0);
  slots.Pin(2);
  EXPECT_EQ(slots.pinned(), 2);
  slots.Unpin(0);
  EXPECT_EQ(slots.pinned(), 2);
  slots.Unpin(0);
  slots.Unpin(2);
  EXPECT_EQ(slots.pinned(), 0);
}

}  // namespace
}  // namespace gearjax
