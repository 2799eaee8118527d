// What a table keeps of its priority updates on the GPU (TableGpu::BeginUpdate):
//
//  * GpuUpdateReportCell: the report the update kernels add their counts to
//    (update_block.h GpuUpdateReport), in GPU-mapped pinned memory, made on
//    the first kernel update under the table's mutex and read from any thread;
//  * GpuUpdateLedger: the tickets of the updates that may still run and their
//    stream (one stream writes the trees at a time), the host callers claiming the
//    priorities meanwhile, and the slots published while an update may run,
//    whose Prioritized leaves wait for the next update kernel or the host
//    (and, once handed to a kernel, are kept until it is known enqueued).
//
// The table holds the ledger under its mutex (GEARJAX_GUARDED_BY), and the
// report's making, device address and release name that mutex
// (GEARJAX_REQUIRES): the compiler checks every use. The protocol that waits
// on them (table_gpu_updates.cc: TableGpu::BeginUpdate, and the table's own
// writers in Table::OwnPrioritiesLocked) waits releasing the table's mutex.
// CPU-only tables hold an empty ledger and no report.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/gpu/mapped_array.h"
#include "core/gpu/update_block.h"
#include "core/memory.h"
#include "core/table/sample_tickets.h"
#include "core/thread_annotations.h"

namespace gearjax {

class GpuUpdateReportCell {
 public:
  // The report, or null before Make. Any thread.
  const GpuUpdateReport* get() const { return report_.load(std::memory_order_acquire); }
  // Makes the report in memory `mapped` gives (pinned, GPU-mapped), once:
  // false, with nothing made, where that memory has no device address. Only
  // the holder of `owner_mu` (the table's mutex, for every call that makes,
  // hands out or releases the memory: the compiler checks it) makes it;
  // readers on other threads see it whole once get() returns it.
  bool Make(const MappedAllocator* mapped, [[maybe_unused]] const Mutex& owner_mu)
      GEARJAX_REQUIRES(owner_mu);
  // The report's device address, for the kernels (Make first).
  GpuUpdateReport* device_data([[maybe_unused]] const Mutex& owner_mu) const
      GEARJAX_REQUIRES(owner_mu) {
    return const_cast<GpuUpdateReport*>(owner_->device_data());  // the kernels add to it
  }
  // The counts so far; zeros before Make.
  GpuUpdateReport Counts() const;
  // The change the kernels made to the count of positive priorities.
  int64_t PositiveChange() const;

  // Updates refused since the last look: how many, and the first one's bad
  // entry and value where the kernel that refused it could leave them.
  struct Failures {
    unsigned long long count = 0;
    bool detailed = false;
    long long entry = 0;
    double value = 0;
  };
  // Takes the refusals not yet taken: of concurrent callers, one gets each.
  // Frees the report's place for the next refusal's details.
  Failures TakeFailures();

  // The memory, moved out: a table that closes while GPU work may still
  // write the report keeps it for the life of the process.
  std::shared_ptr<void> Release([[maybe_unused]] const Mutex& owner_mu)
      GEARJAX_REQUIRES(owner_mu) {
    return std::shared_ptr<void>(std::move(owner_));
  }

 private:
  std::unique_ptr<MappedArray<GpuUpdateReport>> owner_;
  std::atomic<GpuUpdateReport*> report_{nullptr};
  std::atomic<unsigned long long> taken_failures_{0};
};

// Not thread-safe: the table keeps it under its mutex.
class GpuUpdateLedger {
 public:
  // The latest update begun since the last Forget (ticket 0: none) and its
  // stream.
  struct Last {
    uint64_t ticket = 0;
    const void* stream = nullptr;
  };
  Last last() const;
  // Whether any update recorded since the last Forget may still run (its
  // ticket has not ended). Every one is asked, not only the latest: kernels
  // are enqueued after the table's lock is let go, so two threads on one
  // stream may enqueue theirs out of ticket order, and the latest may end
  // while an earlier one has yet to run.
  bool InFlight(SampleTickets& tickets) const;
  // Whether one that may still run came from a stream other than `stream`.
  bool OtherStreamInFlight(const void* stream, SampleTickets& tickets) const;
  // Whether one has yet to be enqueued (Enqueued or Dropped): until it is,
  // no other update begins (TableGpu::WaitForOtherUpdatesLocked), so that
  // one stream's updates reach it in the order they read the trees and
  // took the mirrors' logs, and no staged update's host function gets on the
  // stream ahead of a kernel it would wait for.
  bool AwaitingEnqueue() const;
  // Forgets every update recorded: call once none is in flight.
  void Forget() { begun_.clear(); }
  // Records an update begun on `stream` with `ticket`, awaiting its enqueue
  // (and forgets those whose ticket has ended).
  void Record(uint64_t ticket, const void* stream, SampleTickets& tickets);
  // The update's kernel is on its stream.
  void Enqueued(uint64_t ticket);
  // Nothing was enqueued under `ticket`: forgotten.
  void Drop(uint64_t ticket);

  // Host callers waiting to own the priorities: while any is, no update
  // begins (TableGpu::BeginUpdate waits).
  void Claim() { ++claims_; }
  void EndClaim() { --claims_; }
  bool claimed() const { return claims_ > 0; }

  // Slots published while an update may run, whose Prioritized leaves are
  // yet to be set from their records.
  void Defer(int64_t slot) { deferred_.push_back(slot); }
  const std::vector<int64_t>& deferred() const { return deferred_; }
  void ClearDeferred() { deferred_.clear(); }
  // The deferred leaves go to the update kernel begun with `ticket`, which
  // sets them: they leave deferred(), kept aside until `ticket` ends, so
  // that TakeBack can defer them again if the kernel is never enqueued
  // (else no one would set them: their items would never be drawn). Forgets
  // the leaves of earlier hand-overs whose ticket has ended (their kernels
  // ran: a ticket not enqueued is taken back before it ends).
  void HandDeferred(uint64_t ticket, SampleTickets& tickets);
  // The update begun with `ticket` was not enqueued: the leaves handed to it
  // are deferred again (none: nothing changes). Before `ticket` ends.
  void TakeBack(uint64_t ticket);
  // The leaves handed to updates whose ticket may not have ended, all told.
  int64_t handed() const;

 private:
  struct Handed {
    uint64_t ticket;
    std::vector<int64_t> slots;
  };

  struct Begun {
    uint64_t ticket;
    const void* stream;
    bool enqueued;
  };
  std::vector<Begun> begun_;  // updates recorded since the last Forget, some ended
  int64_t claims_ = 0;
  std::vector<int64_t> deferred_;
  std::vector<Handed> handed_;  // one per update in flight that took leaves
};

}  // namespace gearjax
