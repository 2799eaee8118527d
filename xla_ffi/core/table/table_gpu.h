// The GPU side of a table: what the CUDA handlers (and the tests' emulations
// of them on the CPU) call to sample and update priorities on the device.
// CPU-only code includes table.h and never sees it.
//
// A TableGpu is a view of one Table, made where it is needed
// (TableGpu(table).BeginSample(...)); it holds no state of its own. The state
// it works on (the tickets handed to the device and their completion ring,
// the GPU update ledger and report, the staging lists and tree mirrors)
// stays the table's, under the table's mutex, because the table's own writers
// take part in the protocol: every host writer of priorities waits for a GPU
// update in flight (Table::OwnPrioritiesLocked) and a writer of a slot waits
// for the GPU samples that drew it (sample tickets). Invariants: table.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/common.h"
#include "core/gpu/gpu_completions.h"
#include "core/gpu/gpu_selection.h"
#include "core/gpu/mirror_block.h"
#include "core/gpu/update_block.h"
#include "core/memory.h"
#include "core/sample_request.h"
#include "core/table/table.h"
#include "core/thread_annotations.h"

namespace gearjax {

class GpuStaging;  // gpu/gpu_staging.h

class TableGpu {
 public:
  explicit TableGpu(Table& table) : table_(table) {}

  // A program on GPU `device` may use this table: host arenas (mapped and
  // portable) serve every GPU; a device arena only the GPU it was allocated
  // on. Throws InvalidArgument naming both otherwise.
  void CheckDevice(int device) const;
  // GPU kernels may read this table: its arena and selection state were made
  // by `mapped` (GPU-mapped host memory) or its arena by `device` (GPU
  // memory), the hooks a CUDA build registers. Throws InvalidArgument
  // otherwise: memory made without a GPU mapping (no GPU when the table was
  // made, pinning failed, or a test's emulated mapping) is never handed to a
  // kernel, which would fault on it.
  void CheckReachable(const MappedAllocator* mapped, const DeviceMemory* device) const;

  // GPU sampling for Uniform, Timestep, Prioritized and PrioritizedSteps
  // (cut "start" or "end", with replacement): waits on the rate
  // limiter like Table::Select, counts the samples, and returns the device
  // view of the strategy's selector and a ticket to hand back with
  // Table::EndSample (or HandToDevice) once the stream has passed the
  // kernels. Throws if the table is not GPU-mapped or the request is
  // selected on the host (Table::SelectsOnHost).
  //
  // With `copies` (the CUDA handler's, enqueuing on `stream`), a device
  // table's Timestep and Prioritized draws read the tree's copy in GPU
  // memory (tree_mirror.h), and *copies says what the caller must copy into
  // it, on that stream, before the kernel that draws (mirror_block.h;
  // copies->n == 0: nothing), as part of the same ticket. Without `copies`,
  // and where the mirror cannot serve (no GPU memory for it; a Prioritized
  // draw while a staged update, or a GPU update on another stream, may
  // still write the host tree, or while another stream's copy into the
  // mirror may still run), the kernel reads the GPU-mapped host tree.
  uint64_t BeginSample(const SampleRequest& request, GpuSelection* selection,
                       MirrorCopies* copies = nullptr, const void* stream = nullptr);
  // The caller could not enqueue the copies a Begin gave it: every mirror
  // is copied whole next time.
  void MirrorCopiesLost();
  // Pinned memory, GPU-mapped by the table's allocator, of at least `bytes`
  // that nothing else uses until `ticket` has ended: a host-selected GPU
  // sample's draws, which its gather kernel reads in place (a copy from
  // pageable memory could outlive the vector it came from: CUDA does not
  // promise such a copy is staged when cudaMemcpyAsync returns). {host,
  // device} addresses, or {nullptr, nullptr} where none can be had. Throws
  // Closed.
  std::pair<void*, const void*> StagingFor(uint64_t ticket, size_t bytes);
  // The trees that have a mirror, host copy and mirror side by side (for
  // tests and diagnostics: mirror bytes copied out through the hooks).
  struct MirroredTree {
    std::vector<double> host, mirror;
  };
  std::vector<MirroredTree> MirroredTrees() const;

  // The completion ring of this table's GPU samples, made on first use, and
  // GPU `device`'s block counts in `memory` (the CUDA handlers' GPU memory,
  // `device` current on this thread; GpuCompletions::kEmulated with nullptr
  // for emulations on the CPU). One atomic load once both exist. Throws
  // Closed after Close. Tickets taken after this call can be handed to the
  // device.
  void UseCompletions(const DeviceMemory* memory, int device);
  // Instead of Table::EndSample: the ticket comes back when the GPU writes
  // it into the completion ring (gpu_completions.h), after the kernels
  // enqueued for the sample, which were given CompletionFor(ticket). From
  // any thread.
  void HandToDevice(uint64_t ticket) { table_.tickets_.HandToDevice(ticket); }
  // Tickets handed to the device that its kernels have not reported yet.
  int64_t TicketsOnDevice() const;
  // What the last kernel of the sample with `ticket`, on GPU `device`,
  // reports through (UseCompletions first).
  CompletionView CompletionFor(uint64_t ticket, int device) const;

  // Staged GPU priority updates (staged_update.h) enqueued on a stream and
  // not yet applied. A GPU sample begins on the host before the stream has
  // applied the updates enqueued before it; its kernels see them, but
  // BeginSample's own checks do not. The one that depends on priorities is
  // Prioritized's "every priority is 0": where it would fail now and
  // updates are in flight, the handler waits for the stream first
  // (WaitsForStagedUpdates).
  void StagedUpdateEnqueued() { table_.staged_updates_.fetch_add(1, std::memory_order_relaxed); }
  void StagedUpdateApplied() { table_.staged_updates_.fetch_sub(1, std::memory_order_release); }
  bool WaitsForStagedUpdates(const SampleRequest& request) const;

  // A priority update applied on the GPU by one kernel (update_block.h), for
  // the CUDA handler: takes a ticket for the kernel enqueued on `stream` (an
  // identity only), which reports it through the completion ring
  // (UseCompletions first; the caller hands it to the device), and fills
  // `update`'s table part (device addresses; the report made on first use).
  // Returns 0 instead, taking nothing, where the update must be staged
  // (staged_update.h): more than kMaxGpuUpdateKeys keys or more shared
  // memory than the GPU lets a block use (`shared_limit`: GpuUpdateFits;
  // the CUDA handler's PriorityUpdateSharedLimit, the emulator's none),
  // selection state not GPU-mapped, a TopK heap (host memory) keeping priorities, a table with
  // step priorities (its per-step copies are host memory), or a staged
  // update in flight (its host function may wait for the priorities, so no
  // kernel may queue behind it). Waits first while the host claims the
  // priorities (Table::OwnPrioritiesLocked), and for GPU updates and mirror
  // copies in flight on another stream: one stream writes the trees at a
  // time, in its own order; and, on any stream, for an update begun and not
  // yet enqueued (the caller calls UpdateEnqueued or UpdateNotEnqueued once
  // it has launched the kernel or given up). On a device table the kernel
  // reads and writes the trees' copies in GPU memory and writes the host
  // trees too; *copies
  // says what the caller must copy into those mirrors first, on `stream`
  // (see BeginSample). The deferred leaves go to the kernel (update->deferred)
  // last, once nothing here can fail. Throws Closed.
  uint64_t BeginUpdate(const void* stream, int64_t n, GpuUpdate* update, MirrorCopies* copies,
                       size_t shared_limit = kAnyGpuSharedMemory);
  // The caller could not enqueue the kernel of the update begun with
  // `ticket` (its copies or its launch failed): the deferred leaves handed
  // to it are deferred again, for the host or the next kernel to set, where
  // they would otherwise stay unset (their items never drawn). Call before
  // the ticket ends. Throws Closed only in a forked copy (forks.h).
  void UpdateNotEnqueued(uint64_t ticket);
  // The kernel of the update begun with `ticket` is on its stream: updates
  // waiting to begin may go ahead. Throws Closed only in a forked copy.
  void UpdateEnqueued(uint64_t ticket);

 private:
  // Staging lists replaced by larger ones (GpuStaging::Retired): the caller
  // frees them only after releasing the table's mutex (declare the list
  // before the lock).
  using RetiredStaging = Table::RetiredStaging;

  // Whether this table's trees get copies in GPU memory (a device table).
  bool MirrorsTreesLocked() const GEARJAX_REQUIRES(table_.mu_);
  // The GPU calls' staging lists and mirror copies (gpu/gpu_staging.h), made
  // on first use: CPU-only tables never hold one.
  GpuStaging& StagingLocked() GEARJAX_REQUIRES(table_.mu_);
  // Why a GPU update must be staged rather than run as a kernel, whatever
  // its size: see BeginUpdate.
  bool KernelCannotUpdateLocked() const GEARJAX_REQUIRES(table_.mu_);
  // Whether the last GPU update, or the last copy into the trees' mirrors
  // (from two streams ever: any), came from a stream other than `stream`
  // and may still run.
  bool OtherStreamUpdateInFlightLocked(const void* stream) const GEARJAX_REQUIRES(table_.mu_);
  bool OtherStreamMirrorCopyLocked(const void* stream) const GEARJAX_REQUIRES(table_.mu_);
  // Hands the deferred leaves to the update kernel `u` (in a pinned list held
  // for `ticket`), which sets them before its own entries; where no list can
  // be had they stay deferred (the host sets them once the kernel has run).
  // The ledger keeps them aside until the ticket ends (UpdateNotEnqueued).
  void HandDeferredLeavesLocked(uint64_t ticket, GpuUpdate* u, RetiredStaging* retired)
      GEARJAX_REQUIRES(table_.mu_);
  // BeginUpdate's steps under the lock. Waits until no host writer claims
  // the priorities and no other stream's update may still run (the lock is
  // released meanwhile).
  void WaitForOtherUpdatesLocked(MutexLock& lock, const void* stream)
      GEARJAX_REQUIRES(table_.mu_);
  // The kernel's view of the table: the records, the report and every
  // Prioritized tree (into trees[0..u.trees)).
  GpuUpdate KernelViewLocked(const SumTree* trees[]) GEARJAX_REQUIRES(table_.mu_);
  // A device table's: waits for another stream's copy into the mirrors, then
  // points the kernel at the mirrors, brought up to date first (*copies),
  // and at the host trees too. Where the wait fails, gives back `ticket`
  // and drops the ledger's record of it, and throws.
  void UseMirrorsLocked(MutexLock& lock, uint64_t ticket, const void* stream,
                        const SumTree* const trees[], GpuUpdate* u, MirrorCopies* copies,
                        RetiredStaging* retired)
      GEARJAX_REQUIRES(table_.mu_);

  Table& table_;
};

}  // namespace gearjax
