// The parts of one native one-sided sample (one_sided.h) that its steps
// share: Reads, the round trips through the Reader (counted, staged, checked)
// and the slot records read now; Drawn, what a round's draw chose; and the
// two draws, down each shard's sum tree (one_sided_tree.cc) or among the
// best items ranked over every shard (one_sided_ranked.cc). one_sided.cc
// reads the windows of what was drawn.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/one_sided/one_sided.h"
#include "core/random.h"
#include "core/table/slots.h"

namespace gearjax::one_sided {

// The number of nodes of a shard's tree level.
inline int64_t LevelNodes(const ShardLayout& s, size_t level) {
  const int64_t end = level + 1 < s.tree_offsets.size() ? s.tree_offsets[level + 1]
                                                         : s.tree_nodes;
  return end - s.tree_offsets[level];
}

class Reads {
 public:
  Reads(Reader& reader, const std::vector<ShardLayout>& shards, int64_t whole_read_bytes)
      : reader_(reader), shards_(shards), whole_read_bytes_(whole_read_bytes) {}

  // One round trip: every shard's spans at once (shards without spans are
  // passed along and copy nothing; none at all: no round trip); `fixed` as
  // Reader::Read. Throws ShardUnavailable.
  void Read(const std::vector<ShardSpans>& spans, bool fixed = false);

  // For spans whose local side holds offsets into `bytes` of staging `use`:
  // the buffer, with the offsets turned into its addresses.
  uint8_t* Stage(int use, size_t bytes, std::vector<ShardSpans>& spans);

  // The records of `slots[k]` (slots of shard k, each >= 0), read now: the
  // whole record array where it fits whole_read_bytes, else one descriptor
  // a slot.
  std::vector<std::vector<SlotInfo>> Records(const std::vector<std::vector<int64_t>>& slots);

  // Whether shard k's records fit whole_read_bytes.
  bool RecordsFit(size_t k) const {
    return shards_[k].capacity * static_cast<int64_t>(sizeof(SlotInfo)) <= whole_read_bytes_;
  }

  const std::vector<ShardLayout>& shards() const { return shards_; }
  int64_t whole_read_bytes() const { return whole_read_bytes_; }
  const Counts& counts() const { return counts_; }

 private:
  Reader& reader_;
  const std::vector<ShardLayout>& shards_;
  int64_t whole_read_bytes_;
  Counts counts_;
};

// What one round drew, by shard k: its rows, each row's slot (-1: the draw
// found none), step (a strategy that draws steps: where the window starts;
// else -1, and the start is drawn from start_words), weight (its
// probability is weight / total), record as read before the window, and the
// words its window's start is drawn from.
struct Drawn {
  std::vector<std::vector<int64_t>> rows, slot, step;
  std::vector<std::vector<double>> weight;
  std::vector<std::vector<SlotInfo>> before;
  std::vector<std::vector<Words4>> start_words;
  double total = 0.0;
  int64_t table_size = 0;  // live items over every shard

  explicit Drawn(size_t shards)
      : rows(shards), slot(shards), step(shards), weight(shards), before(shards),
        start_words(shards) {}
};

// Round `round`'s draw of the rows `todo` by the shards' sum trees (Uniform,
// Timestep, Prioritized; PrioritizedSteps, whose tree has a leaf per step of
// every slot, max_length a slot). Throws InvalidArgument when no shard holds
// anything the strategy can draw.
Drawn DrawByTree(Reads& reads, const Request& request, const std::vector<int64_t>& todo,
                 int round);

// The same for TopK(request.count) and Recent(request.count): uniformly among
// the count best live items of every shard. Throws InvalidArgument when
// every shard is empty.
Drawn DrawRanked(Reads& reads, const Request& request, const std::vector<int64_t>& todo,
                 int round);

}  // namespace gearjax::one_sided
