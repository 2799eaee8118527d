// A priority update from a GPU program, applied without stopping XLA's stream.
//
// The CUDA handler (cuda/ffi_cuda.cu) takes a StagedUpdate, a buffer in pinned
// host memory, and enqueues on XLA's stream, in this order:
//   1. copies of the program's keys and priorities into it (device to host);
//   2. a host function that runs Apply: it decodes them, updates the table and
//      writes the count into the buffer;
//   3. a copy of that count into the program's result (host to device: from
//      pinned memory it is stream-ordered, so it reads what Apply wrote);
//   4. a host function that runs Recycle.
// The handler never waits; the stream waits only while the host functions run
// (Apply holds the table's mutex for the update itself). Samples enqueued
// after the update see it: their kernels run after Apply, and host-selected
// samples synchronise the stream before drawing.
//
// A host function cannot fail its program. Types and sizes are checked by the
// handler before anything is enqueued; values (a NaN or negative priority) are
// checked by Apply, which then changes nothing, writes -1 as the count and
// keeps the error in the table (Table::DeferError) for the next call on the
// table to raise. Apply on a closed table writes -1 and keeps nothing: every
// later call fails with Closed anyway.
//
// A GPU sample begins on the host before the stream has run the updates
// enqueued before it; its kernels see them. Take and Apply count the updates
// in flight on the table, so the sample handler can wait for the stream where
// a check made when the sample begins depends on them
// (TableGpu::WaitsForStagedUpdates).
//
// Buffers come from a process-wide pool and go back to it; nothing here calls
// CUDA directly (the pinned memory comes from the MappedAllocator hook,
// memory.h), so Apply and Recycle are safe inside stream callbacks and the
// whole path is tested on the CPU (staged_update_test.cc, and the testing
// module's staged_update).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/decode.h"
#include "core/memory.h"
#include "core/table/table.h"

namespace gearjax {

class StagedUpdate {
 public:
  // A buffer for `n` keys and priorities in these formats, from the pool or
  // newly allocated: pinned through the MappedAllocator hook when one is set
  // (pinned() tells; a CUDA caller must refuse an unpinned one, since a copy
  // from pageable memory is not stream-ordered), plain memory otherwise.
  // Throws InvalidArgument for n < 0 or n too large for the int32 count,
  // std::bad_alloc when no memory can be had.
  static StagedUpdate* Take(std::shared_ptr<Table> table, KeyFormat keys,
                            PriorityFormat priorities, int64_t n);
  // Back to the pool (or freed, when the pool already keeps enough); drops
  // the table. Safe inside a StreamCallbackScope (releases are deferred).
  static void Recycle(StagedUpdate* update);

  // Applies the staged keys and priorities to the table and writes the count
  // (or -1; see above). Never throws.
  void Apply();

  void* keys() { return buffer_; }
  void* priorities() { return buffer_ + priorities_offset_; }
  int32_t* count() { return reinterpret_cast<int32_t*>(buffer_ + count_offset_); }
  size_t key_bytes() const { return priorities_offset_; }
  size_t priority_bytes() const { return count_offset_ - priorities_offset_; }
  bool pinned() const { return allocator_ != nullptr; }

  // Buffers the pool keeps now, and at most.
  static size_t PoolSize();
  static constexpr size_t kMaxPooled = 64;

 private:
  StagedUpdate(uint8_t* buffer, size_t capacity, const MappedAllocator* allocator)
      : buffer_(buffer), capacity_(capacity), allocator_(allocator) {}
  void Free();

  uint8_t* buffer_;
  size_t capacity_;
  const MappedAllocator* allocator_;  // nullptr: plain memory
  std::shared_ptr<Table> table_;
  KeyFormat key_format_ = KeyFormat::kInt64;
  PriorityFormat priority_format_ = PriorityFormat::kFloat64;
  int64_t n_ = 0;
  bool applied_ = false;  // TableGpu::StagedUpdateApplied was called
  size_t priorities_offset_ = 0, count_offset_ = 0;
};

}  // namespace gearjax
