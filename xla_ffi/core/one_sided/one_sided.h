// Global sampling over a sharded table's shards by one-sided reads, in native
// code: the one sampler of the one-sided exchanges (nixl, verbs), for every
// strategy, whatever moves the bytes (a Reader: NIXL, a Python transport such
// as verbs, memcpy for this process's shards). One call is a whole sample:
//
// 1. what the draw needs of each shard, in one read: for a tree strategy
//    (Uniform, Timestep, Prioritized, PrioritizedSteps) the sum-tree levels that fit
//    whole_read_bytes from the root down (the root is the shard's total),
//    the shard's size (Uniform's root) and, where they fit, its slot records;
//    for a ranking one (TopK, Recent) every slot record and insertion stamp;
// 2. each row's slot: for a tree strategy its shard in proportion to the
//    totals, then its slot down that shard's tree, through the levels held,
//    then one read a level for the rest (SumTreeChild: exactly the owner's
//    own draw; one_sided_tree.cc; PrioritizedSteps' tree has a leaf per step,
//    so the descent ends at a slot and the step its window starts at); for a
//    ranking one uniformly among the
//    `count` best live items of every shard in the global order (shard_ranking.h;
//    one_sided_ranked.cc);
// 3. each slot's record (from step 1, else read), the window, and the record
//    again: a key or state that changed means the owner rewrote the slot
//    meanwhile (keys are never reused), and the row is drawn again, as is a
//    row whose slot was not live. Never a torn window.
//
// Where trees and records fit, a sample is three round trips whose
// descriptors are the windows plus a few per shard. Step 1's spans depend
// only on the shards' layouts, so its read is marked fixed: the NIXL reader
// keeps that transfer and posts it again (nixl_agent.h).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/nixl/nixl_agent.h"
#include "core/sample_request.h"

namespace gearjax::one_sided {

inline constexpr int64_t kWholeReadBytes = int64_t{1} << 20;
inline constexpr int kMaxRounds = 32;

// What a shard's owner published for one strategy (Table::Remote, as
// NativeTable.remote_layout returns it), checked by the caller.
struct ShardLayout {
  std::string peer;  // the owner's NIXL agent; empty: this process's shard (copied)
  uint64_t arena = 0;
  std::vector<uint64_t> column_offsets;
  uint64_t slots = 0;  // SlotInfo[capacity]
  int64_t capacity = 0;
  uint64_t tree = 0;  // the strategy's sum tree (sum_tree.h layout)
  std::vector<int64_t> tree_offsets;
  int64_t tree_nodes = 0;
  uint64_t uniform_root = 0;  // Uniform's root: the number of live items
  int64_t max_length = 0;
  uint64_t stamps = 0;  // int64_t[capacity], insertion stamps (read by ranking strategies)
};

// Spans of one shard's memory to copy into local memory.
struct ShardSpans {
  int shard;  // index into the shards given to Sample
  std::vector<uint64_t> remote, local, sizes;
};

// The staging buffers of one sample, by use (Reader::Staging).
enum Use : int { kSnapshotStaging = 0, kLineStaging = 1, kRecordStaging = 2, kNumStagings = 3 };

// Moves bytes for the sampler: a transport for other processes' shards,
// memcpy for this process's own.
class Reader {
 public:
  virtual ~Reader() = default;
  // Copies every span; returns {-1, ""} or the index into `spans` of the
  // first shard that failed or ran past the deadline, and why. `fixed`: the
  // same spans are read again in every sample (the snapshot), so a transport
  // may keep what it prepared for them and use it again.
  virtual nixl::ReadResult Read(const std::vector<ShardLayout>& shards,
                                const std::vector<ShardSpans>& spans, bool fixed) = 0;
  // A local buffer of at least `bytes` for reads (registered with the
  // transport), one per use (Use), kept; its contents need not be.
  virtual uint8_t* Staging(int use, size_t bytes) = 0;
};

// Copies every span with memcpy: shards in this process only.
class CopyReader : public Reader {
 public:
  nixl::ReadResult Read(const std::vector<ShardLayout>& shards,
                        const std::vector<ShardSpans>& spans, bool fixed) override;
  uint8_t* Staging(int use, size_t bytes) override;

 private:
  std::vector<uint8_t> staging_[kNumStagings];
};

struct Column {
  int64_t step_bytes;
  std::vector<uint8_t> pad;  // one step
};

struct Outputs {
  int64_t* keys;  // global keys
  int32_t* start;
  float* probability;
  int64_t* table_size;
  int32_t* valid;
  int32_t* shard;  // the shard's number
  std::vector<uint8_t*> columns;  // [batch, width, step_bytes] each, reads land here
};

struct Request {
  std::vector<int> numbers;  // each shard's number (global keys: number << shard_shift | key)
  int shard_shift = 0;
  std::vector<Column> columns;
  uint32_t seed[2] = {0, 0};
  int64_t batch = 0;
  int64_t window = 0;  // 0: whole trajectories from step 0, width max_length
  bool pad_left = false;
  Strategy strategy = Strategy::kUniform;  // its tree is in the layouts; a ranking one has none
  int64_t count = 0;  // TopK's k, Recent's n (>= 1 for those)
  // Tree levels and slot records up to this many bytes a shard are read
  // whole in step 1 rather than per row: at about 3 us a descriptor over
  // loopback UCX (scripts/bench_nixl_reader.py) and 10 GB/s, 1 MiB costs
  // what 30 rows do.
  int64_t whole_read_bytes = kWholeReadBytes;
};

struct Counts {
  int round_trips = 0;
  int64_t descriptors = 0;
};

// A shard's read failed or ran past the deadline.
class ShardUnavailable : public std::runtime_error {
 public:
  ShardUnavailable(int shard, const std::string& why)
      : std::runtime_error(why), shard(shard) {}
  int shard;  // index into the shards given to Sample
};

// One sample of request.batch rows over `shards` (steps 1-3 above). Throws
// ShardUnavailable, InvalidArgument for a request or layout that does not
// fit and when no shard holds anything to draw, std::runtime_error when rows
// could not be read consistently in kMaxRounds.
Counts Sample(Reader& reader, const std::vector<ShardLayout>& shards, const Request& request,
              const Outputs& out);

}  // namespace gearjax::one_sided
