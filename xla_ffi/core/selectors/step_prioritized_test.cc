// StepPrioritizedSelector's full-window trees (step_prioritized.h): kept up
// to date step by step, they draw what a tree built afresh from the same
// steps draws.
#include "core/selectors/step_prioritized.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/table/slots.h"

namespace gearjax {
namespace {

constexpr int64_t kCapacity = 4, kMaxLength = 10, kWindow = 4;

// Slots 0-2 live, of 10, 6 and 3 steps (3: too short for a full window);
// slot 3 free.
std::vector<SlotInfo> Slots() {
  std::vector<SlotInfo> slots(kCapacity);
  const int64_t lengths[] = {10, 6, 3, 0};
  for (int64_t s = 0; s < kCapacity; ++s) {
    slots[s] = {s, lengths[s], 1.0, 0, s < 3 ? SlotState::kLive : SlotState::kFree};
  }
  return slots;
}

void InsertLive(StepPrioritizedSelector& selector, const std::vector<SlotInfo>& slots) {
  for (int64_t s = 0; s < kCapacity; ++s) {
    if (slots[s].state == SlotState::kLive) {
      selector.Insert({s, slots[s].key, slots[s].length, slots[s].priority});
    }
  }
}

// Rows drawn with replacement from the full-window tree at evenly spaced u.
std::vector<Selection> DrawFull(StepPrioritizedSelector& selector) {
  std::vector<double> u(997);
  for (size_t i = 0; i < u.size(); ++i) u[i] = (static_cast<double>(i) + 0.5) / u.size();
  const uint32_t seed[2] = {1, 2};
  std::vector<Selection> out(u.size());
  EXPECT_TRUE(selector.SelectFull({seed, u.data(), static_cast<int64_t>(u.size()), 0, {}},
                                  kWindow, out.data()));
  return out;
}

TEST(StepPrioritizedSelector, FullWindowTreeUpdatedStepByStepDrawsAsOneBuiltAfresh) {
  const std::vector<SlotInfo> slots = Slots();
  std::vector<double> steps(kCapacity * kMaxLength, 0.0);
  for (int64_t leaf = 0; leaf < kCapacity * kMaxLength; ++leaf) {
    steps[leaf] = 0.5 + static_cast<double>(leaf % 7);
  }
  StepPrioritizedSelector kept(0.6, kCapacity, kMaxLength, steps.data(), slots.data());
  InsertLive(kept, slots);
  DrawFull(kept);  // makes the tree for kWindow, which the updates below keep

  // Leaves in no order of slots: a run of slot 1, then slot 0 past its last
  // full window's start, slot 1 again (an earlier slot), slot 2 (too short).
  const std::vector<int64_t> leaves = {10, 11, 12, 13, 14, 15, 7, 8, 9, 3, 12, 21, 22};
  for (size_t i = 0; i < leaves.size(); ++i) steps[leaves[i]] = 3.0 + 0.25 * i;
  kept.SetSteps(leaves.data(), static_cast<int64_t>(leaves.size()));

  StepPrioritizedSelector fresh(0.6, kCapacity, kMaxLength, steps.data(), slots.data());
  InsertLive(fresh, slots);
  const std::vector<Selection> a = DrawFull(kept), b = DrawFull(fresh);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].slot, b[i].slot) << i;
    EXPECT_EQ(a[i].step, b[i].step) << i;
    EXPECT_EQ(a[i].probability, b[i].probability) << i;
    // A full window of kWindow steps starts there.
    EXPECT_LE(a[i].step, slots[a[i].slot].length - kWindow) << i;
  }
}

}  // namespace
}  // namespace gearjax
