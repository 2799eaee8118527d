// The trajectory table: one aligned arena holding every column of every slot,
// the slot lifecycle (free -> writing -> live -> evicted), the removers, the
// selection structures behind every sampling strategy, and the rate limiter.
// CPU and CUDA handlers both sample through this class; only the byte copying
// differs between them.
//
// Layout: column c occupies one region of capacity * max_length * step_bytes[c]
// bytes; slot s of column c starts at region + s * max_length * step_bytes[c],
// so any window of any trajectory is one contiguous run of bytes per column.
// The arena is host memory (GPU-mapped pinned when a GPU is present) or, for
// placement "device", GPU memory that the host reaches only through copies.
//
// Invariants (all guarded by one mutex):
//  * A slot is selectable iff it is live. Only live slots are in the key index,
//    the priority index and the sum trees.
//  * A sampler pins every slot it draws before releasing the mutex and unpins
//    it after copying. A writer takes its slot out of every index first, then
//    waits for the slot's pins to drop to zero before copying into it. So no
//    sample ever sees a window that is half old, half new data.
//  * GPU samples select on the device, so they cannot pin the slots they draw.
//    Instead each takes a ticket when it is enqueued (BeginGpuSample) and
//    returns it when the stream has passed its kernels (EndGpuSample). A writer
//    that evicted a slot also waits until every GPU sample enqueued before the
//    eviction has ended: later ones see the slot's weight 0 and never draw it.
//  * Keys are assigned when a trajectory is published, from a counter that only
//    grows: unique, increasing with (publication) order, never reused. A slot
//    keeps its key and length until it is republished, so a GPU sample that
//    drew it just before its eviction reports the key of the data it read.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common.h"
#include "draw.h"
#include "mapped_array.h"
#include "memory.h"

namespace gearjax {

enum class Remover : int32_t { kFifo = 0, kLifo = 1, kMinPriority = 2 };

enum class Strategy : int32_t {
  kUniform = 0,      // trajectories uniformly
  kTimestep = 1,     // trajectories in proportion to their length
  kPrioritized = 2,  // trajectories in proportion to priority ** alpha
  kTopK = 3,         // uniformly over the k highest priorities (ties: newer first)
  kRecent = 4,       // uniformly over the n newest
};

struct ColumnSpec {
  std::string name;
  int64_t step_bytes = 0;
  std::vector<uint8_t> pad_step;  // one step's bytes filled with the pad value
};

// Reverb's rate limiter, counted in sampled items. diff = inserts *
// samples_per_insert - samples. A batch of B may be sampled when size >=
// min_size and diff - B >= min_diff; a trajectory may be inserted when the
// table holds fewer than min_size or diff + samples_per_insert <= max_diff.
// Blocked operations wait up to timeout_seconds, then fail with Timeout.
struct RateLimiterSpec {
  int64_t min_size = 1;
  double samples_per_insert = 0.0;
  double min_diff = -std::numeric_limits<double>::infinity();
  double max_diff = std::numeric_limits<double>::infinity();
  double timeout_seconds = 0.0;
};

struct TableSpec {
  std::vector<ColumnSpec> columns;
  int64_t capacity = 0;
  int64_t max_length = 0;
  Remover remover = Remover::kFifo;
  RateLimiterSpec limiter;
  bool gpu_mapped = false;  // ask for GPU-mapped pinned memory (see memory.h)
  bool on_device = false;   // keep the arena in GPU memory (needs DeviceMemory hooks)
};

struct SampleRequest {
  Strategy strategy = Strategy::kUniform;
  double param = 0.0;  // alpha for kPrioritized, k for kTopK, n for kRecent
  int64_t batch = 0;
  int64_t window = 0;  // steps per window; 0 means whole trajectories from step 0
};


struct ItemInfo {
  int64_t key;
  int64_t slot;
  int64_t length;
  double priority;
};

struct Counters {
  int64_t next_key = 0;
  int64_t inserts = 0;
  double samples = 0;
  int64_t evictions = 0;
  int64_t priority_updates = 0;
};

// What a GPU selection kernel reads (device addresses; see select_block.h).
struct GpuSelection {
  const double* nodes;    // the strategy's sum tree
  int64_t leaves;
  const int64_t* keys;    // per slot
  const int64_t* lengths; // per slot
  int64_t table_size;     // trajectories stored when the sample began
};

struct Stats {
  int64_t size, capacity, max_length, num_steps, writers, pinned_slots, gpu_samples_in_flight;
  Counters counters;
  int64_t bytes_reserved, bytes_used;
  double seconds_alive;
};

// The table's bytes, allocated once for its lifetime. Host arenas are
// GPU-mapped pinned memory when asked for and available (see memory.h),
// otherwise aligned ordinary memory. Device arenas are GPU memory: host_data()
// is nullptr and the host goes through Write and Read.
class Arena {
 public:
  // Throws InvalidArgument if a device arena is asked for and no GPU memory
  // hooks are registered, std::bad_alloc if the memory cannot be had.
  Arena(size_t bytes, bool gpu_mapped, bool on_device);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  // The arena in the host's address space; nullptr for a device arena.
  uint8_t* host_data() const { return host_; }
  // The arena in the GPU's address space; nullptr unless mapped or on device.
  const uint8_t* device_data() const { return device_; }
  bool on_device() const { return device_memory_ != nullptr; }
  size_t bytes() const { return bytes_; }
  // Host <-> arena copies that work for every kind of arena.
  void Write(size_t offset, const void* src, size_t n);
  void Read(void* dst, size_t offset, size_t n) const;

 private:
  uint8_t* host_ = nullptr;
  uint8_t* device_ = nullptr;
  const MappedAllocator* mapped_by_ = nullptr;
  const DeviceMemory* device_memory_ = nullptr;
  size_t bytes_ = 0;
};

class Table {
 public:
  explicit Table(TableSpec spec);  // throws InvalidArgument, std::bad_alloc
  ~Table();

  const TableSpec& spec() const { return spec_; }
  int num_columns() const { return static_cast<int>(spec_.columns.size()); }
  int64_t step_bytes(int c) const { return spec_.columns[c].step_bytes; }
  // Arena offset of step `step` of slot `slot` in column c.
  size_t StepOffset(int c, int64_t slot, int64_t step) const {
    return column_offset_[c] +
           static_cast<size_t>(slot * spec_.max_length + step) * spec_.columns[c].step_bytes;
  }
  // The same step in host memory; host arenas only (CPU gathers).
  const uint8_t* StepPointer(int c, int64_t slot, int64_t step) const {
    return arena_.host_data() + StepOffset(c, slot, step);
  }
  // The arena in host memory; nullptr when it lives on the GPU.
  uint8_t* arena_data() const { return arena_.host_data(); }
  bool on_device() const { return arena_.on_device(); }
  // Where GPU kernels see the arena; nullptr when it is neither GPU-mapped
  // nor on the GPU.
  const uint8_t* device_arena() const { return arena_.device_data(); }
  size_t column_offset(int c) const { return column_offset_[c]; }
  // Column c's pad step, kept inside the arena so GPU kernels can read it too.
  size_t pad_offset(int c) const { return pad_offsets_[c]; }
  // Whether column c's pad step is one byte repeated (so memset can fill it).
  bool pad_is_one_byte(int c) const { return pad_one_byte_[c]; }

  // Copies `length` steps of every column (sources[c] holds length *
  // step_bytes(c) contiguous bytes) into a slot and publishes it. Evicts by the
  // remover when full; waits on the rate limiter. Checkpoint restores pass
  // `restore_key` >= 0 (must exceed every key so far) and the free slot
  // `restore_slot` it occupied, and bypass the limiter.
  // Call without the GIL: it may wait.
  int64_t Insert(const std::vector<const void*>& sources, int64_t length, double priority,
                 int64_t restore_key = -1, int64_t restore_slot = -1);

  // Insert's slot lifecycle with the copy left to the caller: `fill(slot)`
  // runs without the mutex, once the slot is reserved and no sampler can read
  // it, and must have written `length` steps of every column (at StepOffset)
  // when it returns. If it throws, the slot goes back to the free list (data
  // it evicted stays evicted) and the exception propagates. CUDA inserts of
  // device arrays fill with copies on XLA's stream.
  using Fill = std::function<void(int64_t slot)>;
  int64_t InsertWith(int64_t length, double priority, const Fill& fill,
                     int64_t restore_key = -1, int64_t restore_slot = -1);

  // Copies the first `steps` steps of column c of `slot` to dst. The caller
  // holds a pin on the slot (PinItems), so it cannot change meanwhile.
  void ReadSteps(int c, int64_t slot, int64_t steps, void* dst) const;

  // Draws request.batch rows and pins their slots; waits on the rate limiter.
  // `seed` (two words) determines every draw (see random.h). Every successful
  // Select must be followed by Release of the same draws.
  void Select(const SampleRequest& request, const uint32_t seed[2], Draw* draws);
  void Release(const Draw* draws, int64_t count);

  // GPU sampling for the sum-tree strategies (Uniform, Timestep, Prioritized):
  // waits on the rate limiter like Select, counts the samples, and returns the
  // device view of the strategy's tree and a ticket to hand back with
  // EndGpuSample once the stream has passed the kernels. Throws if the table
  // is not GPU-mapped or the strategy has no tree.
  uint64_t BeginGpuSample(const SampleRequest& request, GpuSelection* selection);
  void EndGpuSample(uint64_t ticket);

  // Sets priorities of the keys still live; others are skipped. All values are
  // checked first (finite, >= 0): on error nothing changes. Later duplicates
  // win. Returns how many keys were live.
  int64_t UpdatePriorities(const int64_t* keys, const double* priorities, int64_t count);

  // Makes the sum tree for Prioritized(alpha) exist (O(N) the first time).
  void EnsurePriorityTree(double alpha);

  // Pins live slots and lists them in key order (for checkpoints and reads);
  // UnpinSlots releases them.
  // With keys == nullptr, every live item; otherwise those of `keys` still live.
  std::vector<ItemInfo> PinItems(const int64_t* keys = nullptr, int64_t count = 0);
  void UnpinSlots(const std::vector<int64_t>& slots);

  // Free slots in the order inserts will take them (last first).
  std::vector<int64_t> FreeSlots() const;
  // Ends a checkpoint restore: counters, and the free-slot order, which must
  // list exactly the slots not in use.
  void RestoreState(const Counters& counters, const std::vector<int64_t>& free_slots);
  Stats GetStats() const;
  void Close();
  bool closed() const;

 private:
  struct Index;  // selection structures; defined in table.cc

  void CheckOpenLocked() const;
  bool CanSampleLocked(int64_t batch) const;
  void CheckRequest(const SampleRequest& request) const;
  // Waits until the limiter admits the request (or throws Timeout/Closed).
  void WaitToSampleLocked(std::unique_lock<std::mutex>& lock, const SampleRequest& request);
  bool GpuQuietSince(uint64_t ticket) const {
    return gpu_in_flight_.empty() || *gpu_in_flight_.begin() > ticket;
  }
  bool CanInsertLocked() const;
  int64_t AcquireSlotLocked(std::unique_lock<std::mutex>& lock, bool* evicted);
  void EvictLocked(int64_t slot);
  void PublishLocked(int64_t slot, int64_t key, int64_t length, double priority);
  void SetPriorityLocked(int64_t slot, double priority);
  int64_t DrawSlotLocked(const SampleRequest& request, double u, float* probability) const;
  double PriorityWeight(double priority, double alpha) const;
  std::string LimiterStateLocked() const;

  TableSpec spec_;
  Arena arena_;
  std::vector<size_t> column_offset_;
  std::vector<size_t> pad_offsets_;
  std::vector<bool> pad_one_byte_;
  std::chrono::steady_clock::time_point created_at_;

  mutable std::mutex mu_;
  std::condition_variable changed_;  // any publish, release, eviction or close
  bool closed_ = false;

  // Slot lifecycle.
  enum class SlotState : uint8_t { kFree, kWriting, kLive };
  std::vector<SlotState> state_;
  MappedArray<int64_t> key_, length_;  // GPU kernels read them (see select_block.h)
  std::vector<double> priority_;
  std::vector<int32_t> pins_;
  std::vector<int64_t> free_slots_;  // may hold stale entries after restores; see AcquireSlotLocked
  int64_t live_ = 0, writers_ = 0, num_steps_ = 0, pinned_slots_ = 0;
  uint64_t gpu_tickets_ = 0;           // last ticket handed out
  std::set<uint64_t> gpu_in_flight_;   // tickets not yet returned
  Counters counters_;
  std::unique_ptr<Index> index_;
};

}  // namespace gearjax
