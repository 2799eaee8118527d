// What a table's GPU calls stage in pinned, GPU-mapped memory, and the copies
// into its trees' mirrors in GPU memory (tree_mirror.h): the lists those
// copies read (the nodes logged since the last copy), the deferred leaves an
// update kernel sets, and a host-selected sample's draws (TableGpu::StagingFor),
// each list held until the ticket of the call that uses it has ended; and the
// copies into the mirrors that may still run, their tickets and streams,
// which a sample or an update on another stream must not overtake.
//
// The table makes it on a GPU call's first use, so CPU-only tables never hold
// one, and keeps it under its mutex (not thread-safe by itself).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/gpu/mapped_array.h"
#include "core/gpu/mirror_block.h"
#include "core/memory.h"
#include "core/selectors/sum_tree.h"
#include "core/table/sample_tickets.h"

namespace gearjax {

class GpuStaging {
 public:
  // Lists replaced by larger ones. Freeing pinned memory (cudaFreeHost) waits
  // for the whole device, and a staged update's host function queued there
  // may need the table's mutex: the caller frees them only after releasing
  // it (declare the list before the lock).
  using Retired = std::vector<std::shared_ptr<void>>;

  // Lists from `mapped` (the table's allocator); mirrors in `device` memory
  // (null: none are made).
  GpuStaging(const MappedAllocator* mapped, const DeviceMemory* device)
      : mapped_(mapped), device_(device) {}

  // Pinned memory for `entries` int64 that nothing else uses until `ticket`
  // has ended (`tickets` says which have): a list whose ticket ended, or a
  // new one twice the size asked (a log grows) in place of an ended one too
  // small, which goes to *retired. nullptr where no GPU-mapped memory can be
  // had. Throws std::bad_alloc.
  MappedArray<int64_t>* ListFor(int64_t entries, uint64_t ticket, SampleTickets& tickets,
                                Retired* retired);

  // Adds to *copies what brings the mirrors of trees[0 .. n) up to date
  // (each mirror made on first use), the logged nodes listed in a list held
  // for `ticket` (every node where no list can be had); writes each tree's
  // mirror to mirrors[i], or nullptr where the GPU-mapped host tree must
  // serve (no room left in *copies, or no GPU memory for a mirror).
  // Remembers `ticket` and `stream` as the last copy's.
  void CopyMirrors(const SumTree* const* trees, int n, uint64_t ticket, const void* stream,
                   SampleTickets& tickets, MirrorCopies* copies, double** mirrors,
                   Retired* retired);

  // Whether a copy into the mirrors enqueued on a stream other than
  // `stream` may still run, any of them, not only the latest (after copies
  // from two streams, any copy in flight counts as another's).
  bool OtherStreamCopyInFlight(const void* stream, SampleTickets& tickets) const;
  // The last copy's ticket (0: none yet).
  uint64_t last_copy() const { return copy_last_; }

  // Moves every list out (the table frees them without its mutex).
  void TakeLists(std::vector<std::shared_ptr<void>>* memory);

 private:
  struct List {
    uint64_t ticket;
    MappedArray<int64_t> entries;
  };

  const MappedAllocator* const mapped_;
  const DeviceMemory* const device_;
  std::vector<std::shared_ptr<List>> lists_;
  struct Copy {
    uint64_t ticket;
    const void* stream;
  };
  std::vector<Copy> copies_in_flight_;  // some may have ended (pruned at each copy)
  uint64_t copy_last_ = 0;
  const void* copy_stream_ = nullptr;
  bool copy_streams_mixed_ = false;
};

}  // namespace gearjax
