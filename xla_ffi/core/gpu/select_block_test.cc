// Tests of the GPU selection's row code (select_block.h) against selection
// state caught mid-change, as a kernel reading mapped host memory may see it:
// a leaf set to zero under stale parents, a slot that left while its weight
// was still in the tree, a tree emptied under a stale root. A zero-weight or
// non-live slot is never returned, and a row that finds nothing comes back
// empty with a finite importance weight.
#include "core/gpu/select_block.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/selectors/sum_tree.h"

namespace gearjax {
namespace {

constexpr int64_t kSlots = 64;

// A tree of weight 1 per slot and live records; `nodes` is a copy the test
// may corrupt, as a concurrent update would leave it.
struct State {
  SumTree tree{kSlots, /*gpu_mapped=*/false};
  std::vector<double> nodes;
  std::vector<SlotInfo> info;

  State() {
    info.resize(kSlots);
    for (int64_t s = 0; s < kSlots; ++s) {
      tree.Set(s, 1.0);
      info[s] = SlotInfo{};
      info[s].key = 1000 + s;
      info[s].length = 5;
      info[s].priority = 1.0;
      info[s].state = SlotState::kLive;
    }
    const SumTreeView v = tree.view();
    nodes.assign(v.nodes, v.nodes + tree.node_count());
  }

  GpuSelection Selection() {
    GpuSelection s{};
    s.uniform = false;
    s.tree = tree.view();
    s.tree.nodes = nodes.data();  // the (possibly corrupted) copy
    s.info = info.data();
    s.capacity = kSlots;
    s.table_size = kSlots;
    s.cut = Cut::kStart;
    return s;
  }
};

TEST(SelectRow, ALeafZeroedUnderStaleParentsIsNeverReturned) {
  State state;
  // Slots 0..31 zeroed at the leaves only: the parents still count them, as
  // mid-update. Half the descents end on a zero leaf and must redraw.
  for (int64_t s = 0; s < 32; ++s) state.nodes[s] = 0.0;
  const GpuSelection selection = state.Selection();
  const uint32_t seed[2] = {7, 9};
  int empty = 0;
  for (int64_t b = 0; b < 4000; ++b) {
    const Draw d = SelectRow(selection, seed, 3, b);
    if (d.key < 0) {
      ++empty;
      continue;
    }
    ASSERT_GE(d.slot, 32) << "row " << b << " drew a zero-weight leaf";
    EXPECT_GT(d.probability, 0.0f);
    EXPECT_EQ(d.key, 1000 + d.slot);
  }
  // Each draw fails with probability 1/2: 9 failures in a row are rare.
  EXPECT_LT(empty, 40);
}

TEST(SelectRow, ASlotThatLeftIsNeverReturnedEvenWithItsWeightStillInTheTree) {
  State state;
  for (int64_t s = 0; s < kSlots; s += 2) state.info[s].state = SlotState::kWriting;
  state.info[1].state = SlotState::kFree;
  const GpuSelection selection = state.Selection();
  const uint32_t seed[2] = {1, 2};
  for (int64_t b = 0; b < 2000; ++b) {
    const Draw d = SelectRow(selection, seed, 0, b);
    if (d.key < 0) continue;
    ASSERT_EQ(d.slot % 2, 1) << "row " << b;
    ASSERT_NE(d.slot, 1);
    EXPECT_EQ(d.valid, d.length);
  }
}

TEST(SelectRow, ALeafPastTheSlotsIsNeverReturned) {
  // A mirror read before its first copy (garbage), or a tree's padding
  // leaves holding weight: a descent may end past the table's slots, whose
  // records do not exist. Here the last 8 leaves lie past a capacity of 56.
  State state;
  GpuSelection selection = state.Selection();
  selection.capacity = kSlots - 8;
  const uint32_t seed[2] = {5, 6};
  int drawn = 0;
  for (int64_t b = 0; b < 4000; ++b) {
    const Draw d = SelectRow(selection, seed, 2, b);
    if (d.key < 0) continue;
    ++drawn;
    ASSERT_LT(d.slot, kSlots - 8) << "row " << b << " drew a leaf past the slots";
  }
  EXPECT_GT(drawn, 3900);  // 1 draw in 8 lands past them, and is drawn again
}

TEST(SelectRow, ARowThatFindsNothingComesBackEmptyWithAFiniteWeight) {
  State state;
  for (int64_t s = 0; s < kSlots; ++s) state.nodes[s] = 0.0;  // emptied under a stale root
  const GpuSelection selection = state.Selection();
  const uint32_t seed[2] = {3, 4};
  for (int64_t b = 0; b < 50; ++b) {
    const Draw d = SelectRow(selection, seed, 4, b);
    EXPECT_EQ(d.key, -1);
    EXPECT_EQ(d.valid, 0);
    EXPECT_FLOAT_EQ(d.probability, 1.0f / kSlots);
    EXPECT_EQ(d.table_size, kSlots);
  }
}

TEST(SelectRow, AConsistentStateDrawsOnTheFirstTry) {
  State state;
  const GpuSelection selection = state.Selection();
  const uint32_t seed[2] = {5, 6};
  for (int64_t b = 0; b < 500; ++b) {
    const Words4 w = RowWords(seed, b);
    const Draw d = SelectRow(selection, seed, 2, b);
    EXPECT_EQ(d.slot, SumTreeDraw(state.tree.view(), UniformFromBits(w.w[0], w.w[1])));
    EXPECT_FLOAT_EQ(d.probability, 1.0f / kSlots);
  }
}

}  // namespace
}  // namespace gearjax
