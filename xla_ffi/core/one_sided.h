// Global sampling over a sharded table's shards by one-sided reads, in native
// code: the sampler of the nixl exchange for Uniform, Timestep and
// Prioritized (gearjax/sharded/one_sided.py documents the protocol and keeps
// the ranked strategies and the verbs transport). One call is a whole sample
// with no Python in it:
//
// 1. one snapshot per shard in one read: the sum-tree levels that fit
//    kWholeReadBytes from the root down (the root is the shard's total), the
//    shard's size (Uniform's root) and, where they fit, its slot records;
// 2. each row's shard in proportion to the totals, then its slot by the
//    shard's tree: through the levels held, then one read a level for the
//    rest (SumTreeChild: exactly the owner's own draw);
// 3. each slot's record (from the snapshot, else read), the window, and the
//    record again: a key or state that changed means the owner rewrote the
//    slot meanwhile (keys are never reused), and the row is drawn again, as
//    is a row whose slot was not live. Never a torn window.
//
// Where trees and records fit, a sample is three round trips whose
// descriptors are the windows plus a few per shard. The snapshot's spans
// depend only on the shards' layouts (each names its strategy's tree), so
// its read is marked fixed: the NIXL reader keeps that transfer and posts it
// again (nixl_agent.h).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "nixl_agent.h"

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
};

// Spans of one shard's memory to copy into local memory.
struct ShardSpans {
  int shard;  // index into the shards given to Sample
  std::vector<uint64_t> remote, local, sizes;
};

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
  // transport), one per use (0: snapshot, 1: tree lines, 2: records), kept.
  virtual uint8_t* Staging(int use, size_t bytes) = 0;
};

// Copies every span with memcpy: shards in this process only.
class CopyReader : public Reader {
 public:
  nixl::ReadResult Read(const std::vector<ShardLayout>& shards,
                        const std::vector<ShardSpans>& spans, bool fixed) override;
  uint8_t* Staging(int use, size_t bytes) override;

 private:
  std::vector<uint8_t> staging_[3];
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
// ShardUnavailable, InvalidArgument when no shard holds anything to draw,
// std::runtime_error when rows could not be read consistently in kMaxRounds.
Counts Sample(Reader& reader, const std::vector<ShardLayout>& shards, const Request& request,
              const Outputs& out);

}  // namespace gearjax::one_sided
