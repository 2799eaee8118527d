// The worst bookkeeping of a table (see footprint.h): one term per structure,
// in the order table.h lists them. footprint_test.cc and
// tests/test_table_memory.py check it against what a table holds.
#include "core/table/footprint.h"

#include <cstdint>
#include <utility>

#include "core/huge_pages.h"
#include "core/limits.h"
#include "core/selectors/selector.h"
#include "core/selectors/step_prioritized.h"
#include "core/selectors/sum_tree.h"
#include "core/table/slots.h"
#include "core/table/table_reports.h"

namespace gearjax {
namespace {

// A heap block of `bytes` as glibc's malloc hands it out: an 8-byte header,
// rounded up to 16 bytes.
constexpr int64_t MallocBlock(int64_t bytes) { return (bytes + 8 + 15) / 16 * 16; }

// A node of the TopK and Recent rankings (selectors/order_statistics.h: a
// __gnu_pbds red-black tree with order statistics): three links, the colour
// (padded), the subtree size and the value (rank, slot).
template <typename Rank>
constexpr int64_t RankNode() {
  return MallocBlock(3 * sizeof(void*) + 8 + sizeof(int64_t) +
                     sizeof(std::pair<Rank, int64_t>));
}

// A sum tree over `leaves` leaves: its nodes, and SetMany's scratch where
// the tree is updated in batches (one bit per inner node, and the nodes of
// a level: at most one per leaf changed).
int64_t TreeBytes(int64_t leaves, bool batched) {
  const int64_t nodes = SumTree::NodesFor(leaves);
  int64_t bytes = nodes * static_cast<int64_t>(sizeof(double));
  if (batched) bytes += (nodes + 63) / 64 * 8 + leaves * static_cast<int64_t>(sizeof(int64_t));
  return bytes;
}

}  // namespace

int64_t WorstBookkeepingBytes(int64_t capacity, int64_t max_length, Remover remover,
                              bool step_priorities) {
  const int64_t c = capacity;
  int64_t bytes = 0;
  // Slot records, the free list, and per slot: stamp, times sampled, the
  // ticket that freed it.
  bytes += c * static_cast<int64_t>(sizeof(SlotInfo) + 4 * sizeof(int64_t));
  bytes += c * 2 * static_cast<int64_t>(sizeof(int32_t));  // insertion order (both ways)
  bytes += (c + 63) / 64 * 8 + TreeBytes(c, false);         // Uniform: live bits, tree of ones
  bytes += TreeBytes(c, false);                             // Timestep
  // Prioritized, each alpha: its tree and an update's slots and weights.
  bytes += kMaxPriorityTrees * (TreeBytes(c, true) + c * 2 * 8);
  // A priority update's items before and the priorities after.
  bytes += c * static_cast<int64_t>(sizeof(Item) + sizeof(double));
  bytes += c * (RankNode<std::pair<double, int64_t>>() + RankNode<int64_t>());  // TopK, Recent
  if (remover == Remover::kMinPriority) bytes += c * (24 + 8);  // heap entries, positions
  bytes += 2 * 8 * (max_length + 1);                            // the length index
  bytes += c * 2 * 4 + 4 * (max_length + 1);  // the length buckets (Prioritized cut="full")
  // A constrained sample: its candidates, their budgets, and the tree it
  // draws from with that tree's leaves and weights.
  bytes += c * static_cast<int64_t>(sizeof(Candidate) + 8) + TreeBytes(c, true) + c * 2 * 8;
  // A checkpoint's (or contents()'s) items, and the arrays it returns.
  bytes += c * static_cast<int64_t>(sizeof(ItemInfo) + 6 * 8 + 8);
  if (step_priorities) {
    // The step priorities, and each PrioritizedSteps alpha's tree over them
    // with an update's leaves and weights (a step a leaf), and the
    // full-window trees (selectors/step_prioritized.h).
    const int64_t steps = c * max_length;
    bytes += steps * 8 + kMaxPriorityTrees * (TreeBytes(steps, true) + steps * 2 * 8);
    bytes += kMaxPriorityTrees * kMaxFullWindowTrees * TreeBytes(steps, true);
  }
  // Large arrays are on huge pages: each may round up by one.
  bytes += 24 * static_cast<int64_t>(kHugePageSize);
  return bytes;
}

}  // namespace gearjax
