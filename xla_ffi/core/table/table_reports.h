// What a table reports about itself, each a plain value taken in one
// consistent snapshot: strategy totals and best lists for the other shards of
// a sharded table (sharding.h), the memory layout a one-sided reader needs,
// its items for readers and checkpoints, and its counters and stats.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/selectors/sum_tree.h"
#include "core/table/slots.h"

namespace gearjax {

// What a strategy draws in proportion to, summed over the live items: their
// number (Uniform), their steps (Timestep) or their priority ** alpha
// (Prioritized). A shard of a sharded table reports it so that every process
// can draw shards in proportion to it (sharding.h).
struct StrategyTotals {
  int64_t size = 0;
  int64_t num_steps = 0;
  double weight = 0.0;
};

// Where a one-sided reader of another process finds a shard's memory
// (gearjax/sharded/nixl.py): the arena, the slot records, and the sum tree
// of one strategy (Uniform: one per live slot; Timestep: lengths;
// Prioritized: priority ** alpha). Valid until the table is closed.
struct RemoteLayout {
  const uint8_t* arena = nullptr;
  size_t arena_bytes = 0;
  const SlotInfo* slots = nullptr;
  SumTreeView tree{};  // empty for TopK and Recent
  size_t tree_nodes = 0;
  const int64_t* stamps = nullptr;  // capacity entries, one per slot
};

// One item of a shard's best list for TopK (its priority, then its stamp,
// ordering it) or Recent (its stamp): what the shards of a sharded table
// gather to rank their items globally (sharding.h). stamp -1: no item.
struct TopEntry {
  double priority;
  int64_t stamp;
};
static_assert(sizeof(TopEntry) == 16);
// Stamps stay below this (checkpoints are checked against it), so the next
// one never overflows.
inline constexpr int64_t kMaxStamp = int64_t{1} << 62;

struct ItemInfo {
  int64_t key;
  int64_t slot;
  int64_t length;
  double priority;
  int64_t stamp;  // insertion stamp (see the invariants above Table)
  int64_t times_sampled;  // draws counted so far (max_times_sampled > 0 only)
};

struct Counters {
  int64_t next_sequence = 0;  // the sequence number of the next published key
  int64_t inserts = 0;
  double samples = 0;
  int64_t evictions = 0;
  int64_t priority_updates = 0;
};

// One moment of a table, as a checkpoint holds it (Table::PinSnapshot).
struct Snapshot {
  std::vector<ItemInfo> items;  // every live item, pinned, in key order
  Counters counters;
  // The free slots in the order a table restored from the snapshot keeps
  // them: the free list, then the slots writers had reserved and not yet
  // published (their trajectories were not in the table at that moment).
  std::vector<int64_t> free_slots;
  // In a table that keeps step priorities, every item's, back to back in
  // the order of `items`; empty otherwise.
  std::vector<double> step_priorities;
};

struct Stats {
  int64_t size, capacity, max_length, num_steps, writers, pinned_slots, samples_in_flight;
  Counters counters;
  int64_t bytes_reserved, bytes_used;
  double seconds_alive;
  std::vector<double> alphas;  // Prioritized alphas with a sum tree
  // Priority updates for keys >= 0 that named no live trajectory (evicted
  // meanwhile, or never stored), since creation; not checkpointed.
  int64_t skipped_updates;
};

}  // namespace gearjax
