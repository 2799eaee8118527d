// Tests of reading a table's items for checkpoints: a snapshot is one moment
// (items, counters and free slots agree even while an insert is in flight),
// and a table restored from it accepts it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "core/table/table.h"

namespace gearjax {
namespace {

using namespace std::chrono_literals;

TableSpec Spec(int64_t capacity) {
  TableSpec spec;
  spec.name = "snapshot";
  spec.columns.push_back({"x", 4, std::vector<uint8_t>(4, 0)});
  spec.capacity = capacity;
  spec.max_length = 8;
  return spec;
}

int64_t Put(Table& table, int64_t length) {
  std::vector<int32_t> data(static_cast<size_t>(length), 7);
  return table.Insert({data.data()}, length, 1.0);
}

// Restores `snapshot` into a new table as a checkpoint load does.
void Restore(Table& table, const Snapshot& snapshot, int64_t max_length) {
  std::vector<int32_t> data(static_cast<size_t>(max_length), 7);
  for (const ItemInfo& item : snapshot.items) {
    table.Insert({data.data()}, item.length, item.priority, item.key, item.slot, item.stamp);
  }
  table.RestoreState(snapshot.counters, snapshot.free_slots);
}

TEST(TableItems, ASnapshotTakenDuringAnInsertCountsItsSlotFreeAndRestores) {
  for (const int64_t filled : {2, 4}) {  // a free slot taken; a full table: an eviction
    Table table(Spec(4));
    for (int64_t i = 0; i < filled; ++i) Put(table, 3);
    std::atomic<bool> reserved{false}, release{false};
    std::atomic<int64_t> reserved_slot{-1};
    std::thread writer([&] {
      table.InsertWith(2, 1.0, [&](int64_t slot) {
        reserved_slot = slot;
        reserved = true;
        while (!release) std::this_thread::sleep_for(1ms);
        std::vector<int32_t> data(2, 9);
        std::memcpy(table.arena_data() + table.StepOffset(0, slot, 0), data.data(), 8);
      });
    });
    while (!reserved) std::this_thread::sleep_for(1ms);
    const Snapshot snapshot = table.PinSnapshot();
    release = true;
    writer.join();

    const int64_t live = filled == 4 ? 3 : filled;  // the full table evicted one
    ASSERT_EQ(static_cast<int64_t>(snapshot.items.size()), live);
    EXPECT_EQ(static_cast<int64_t>(snapshot.free_slots.size()), 4 - live);
    EXPECT_EQ(snapshot.free_slots.back(), reserved_slot.load());  // taken first after a load
    EXPECT_EQ(snapshot.counters.inserts, filled);  // the insert in flight is not in it
    EXPECT_EQ(snapshot.counters.evictions, filled == 4 ? 1 : 0);
    EXPECT_EQ(snapshot.counters.next_sequence, filled);
    for (const ItemInfo& item : snapshot.items) EXPECT_NE(item.slot, reserved_slot.load());
    std::vector<int64_t> pinned;
    for (const ItemInfo& item : snapshot.items) pinned.push_back(item.slot);
    EXPECT_EQ(table.GetStats().pinned_slots, live);
    table.UnpinSlots(pinned);

    Table restored(Spec(4));
    Restore(restored, snapshot, 8);
    EXPECT_EQ(restored.GetStats().size, live);
    EXPECT_EQ(restored.FreeSlots(), snapshot.free_slots);
    EXPECT_EQ(Put(restored, 1) & 3, reserved_slot.load());  // the reserved slot, first
  }
}

TEST(TableItems, SnapshotsStayConsistentUnderConcurrentInserts) {
  Table table(Spec(64));
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (int w = 0; w < 3; ++w) {
    writers.emplace_back([&, w] {
      while (!stop) Put(table, 1 + w);
    });
  }
  for (int round = 0; round < 200; ++round) {
    const Snapshot snapshot = table.PinSnapshot();
    std::vector<int64_t> pinned;
    for (const ItemInfo& item : snapshot.items) pinned.push_back(item.slot);
    table.UnpinSlots(pinned);
    ASSERT_EQ(snapshot.items.size() + snapshot.free_slots.size(), 64u);
    if (!snapshot.items.empty()) {
      ASSERT_LT(table.key_layout().Sequence(snapshot.items.back().key),
                snapshot.counters.next_sequence);
    }
    Table restored(Spec(64));
    ASSERT_NO_THROW(Restore(restored, snapshot, 8));
  }
  stop = true;
  for (std::thread& t : writers) t.join();
}

}  // namespace
}  // namespace gearjax
