// Where a GPU sample's kernels say they are done, so its ticket (see
// sample_tickets.h) comes back with nothing on the stream but the kernels: no
// host function, which stalled the stream for tens of microseconds a call (the
// first GPU run), and no synchronisation.
//
// Every block of the sample's last kernel (the gather) counts itself done in
// `blocks`; the last one to finish, after a system-wide fence, writes the
// sample's ticket into its place in `done`, a ring in GPU-mapped pinned host
// memory. The host reads the ring only when it needs to know (a writer about
// to reuse a slot, Close, the stats): nothing per call.
//
// Ticket t's place is t % size. A place is taken by a new ticket only once no
// earlier ticket that may use it is still in flight (Table::TakeTicketLocked
// waits for that), so a stale value in `done` is always an older ticket than
// the one looked for, and the place's block count is back at 0.
//
// The block counts live in the memory of the GPU that runs the kernel, one
// array per GPU (a host table is read by every GPU): device atomics stay in
// that GPU's memory, never on the PCIe bus. The ring is pinned memory every
// GPU maps at the same address. The kernels' side is completion_block.h.
#pragma once

#include <atomic>
#include <cstdint>

#include "core/common.h"
#include "core/gpu/completion_block.h"
#include "core/gpu/mapped_array.h"
#include "core/memory.h"

namespace gearjax {

class GpuCompletions {
 public:
  static constexpr uint64_t kSize = 4096;
  static constexpr int kMaxDevices = 64;
  static constexpr int kEmulated = -1;  // the device of emulations on the CPU

  // The ring, in GPU-mapped memory (ordinary memory where nothing maps:
  // emulations on a machine without a GPU).
  // The ring in pinned memory GPU-mapped by `mapped` (the table's
  // allocator; without one no real GPU can report through it).
  explicit GpuCompletions(const MappedAllocator* mapped);
  ~GpuCompletions();
  GpuCompletions(const GpuCompletions&) = delete;
  GpuCompletions& operator=(const GpuCompletions&) = delete;

  // Makes `device`'s block counts, once: in `memory` (the GPU current on this
  // thread must be `device`), zeroed through its copy hook, for a real GPU,
  // whose ring must then be mapped; for kEmulated (memory nullptr) beside the
  // ring. Not thread-safe against itself (the table calls it under its mutex);
  // safe against View and Done.
  void AddDevice(int device, const DeviceMemory* memory);
  bool HasDevice(int device) const { return Counts(device) != nullptr; }

  // Whether the GPU has written `ticket` into its place (one load).
  bool Done(uint64_t ticket) const {
    return __atomic_load_n(&done_[ticket % kSize], __ATOMIC_ACQUIRE) == ticket;
  }
  // The view a kernel on `device` reports `ticket` through (device
  // addresses; AddDevice first).
  CompletionView View(uint64_t ticket, int device) const;

 private:
  uint32_t* Counts(int device) const;

  MappedArray<uint64_t> done_;
  std::atomic<uint32_t*> counts_[kMaxDevices] = {};
  const DeviceMemory* memory_[kMaxDevices] = {};
  MappedArray<uint32_t> emulated_counts_;
};

}  // namespace gearjax
