// GPU priority updates: staged from a stream, or applied by a kernel
// (TableGpu::BeginUpdate, table_gpu.h), and the table's side of the protocol
// that keeps the host out of the priorities while one may run
// (Table::OwnPrioritiesLocked, the deferred leaves of inserts meanwhile); and
// the errors deferred from compiled calls.
#include <algorithm>
#include <new>
#include <string>

#include "core/gpu/gpu_staging.h"
#include "core/limits.h"
#include "core/selectors/prioritized.h"
#include "core/table/table.h"
#include "core/table/table_gpu.h"
#include "core/table/table_internal.h"

namespace gearjax {

bool TableGpu::WaitsForStagedUpdates(const SampleRequest& r) const {
  if (!WeighsByPriority(r)) return false;
  if (table_.staged_updates_.load(std::memory_order_acquire) == 0 &&
      table_.gpu_report_.get() == nullptr) {
    return false;  // never updated on the GPU, nothing staged
  }
  MutexLock lock(table_.CheckedMutex());
  const bool in_flight = table_.staged_updates_.load(std::memory_order_acquire) > 0 ||
                         table_.gpu_updates_.InFlight(table_.tickets_);
  // Deferred leaves are not yet in the trees the kernels draw from.
  return in_flight && table_.PositiveLocked() - table_.DeferredPositiveLocked() == 0;
}

int64_t Table::DeferredPositiveLocked() const {
  int64_t positive = 0;
  for (const int64_t slot : gpu_updates_.deferred()) positive += (*slots_)[slot].priority > 0;
  return positive;
}

int64_t Table::PositiveLocked() const { return positive_ + gpu_report_.PositiveChange(); }

GpuUpdateReport Table::GpuUpdateCounts() const { return gpu_report_.Counts(); }

Table::Clock::time_point Table::GpuWaitDeadline() const {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(spec_.slot_wait_seconds));
}

void Table::ThrowGpuWaitTimeout(const std::string& what) const {
  throw Timeout("waited " + table_internal::Number(spec_.slot_wait_seconds) + " s for " + what +
                ", which has not reported (a GPU stream that does not progress, or a failed "
                "one: a CUDA error in an earlier program?); nothing was changed "
                "(gearjax.table.GPU_WAIT_SECONDS sets how long tables made after it wait)");
}

bool Table::SettledPrioritiesLocked() {
  if (gpu_updates_.InFlight(tickets_)) return false;
  gpu_updates_.Forget();
  if (gpu_updates_.deferred().empty()) return true;
  update_before_.clear();
  update_after_.clear();
  for (const int64_t slot : gpu_updates_.deferred()) {
    const SlotInfo& info = (*slots_)[slot];
    update_before_.push_back({slot, info.key, info.length, info.priority});
    update_after_.push_back(info.priority);
  }
  const int64_t n = static_cast<int64_t>(update_before_.size());
  // Every deferred slot is live: whatever removes one owns the priorities
  // first (OwnPrioritiesLocked), which sets them before it returns.
  for (PrioritizedSelector* selector : selectors_.Of<PrioritizedSelector>(Strategy::kPrioritized)) {
    selector->UpdatePriorities(update_before_.data(), update_after_.data(), n);
  }
  gpu_updates_.ClearDeferred();
  return true;
}

bool Table::OwnPrioritiesLocked() {
  if (SettledPrioritiesLocked()) return false;
  const uint64_t awaited = gpu_updates_.last().ticket;
  bool reported;
  {
    // The caller's lock, borrowed to wait. A claim keeps TableGpu::BeginUpdate
    // waiting meanwhile (no new ticket to wait for); leaving this scope, a
    // throwing wait's too, ends the claim and hands the lock back still
    // locked (the caller's MutexLock unlocks it, once).
    std::unique_lock<std::mutex> lock(mu_.native(), std::adopt_lock);
    struct Claim {
      GpuUpdateLedger& ledger;
      std::unique_lock<std::mutex>& lock;
      ~Claim() {
        ledger.EndClaim();
        lock.release();
      }
    };
    gpu_updates_.Claim();
    Claim claim{gpu_updates_, lock};
    reported = WaitForTickets(lock, GpuWaitDeadline(), [&] {
      mu_.AssertHeld();
      return closed() || !gpu_updates_.InFlight(tickets_);
    });
  }
  changed_.notify_all();
  CheckOpenLocked();
  if (!reported) {
    // The kernel may still write the priorities: nothing here may touch them.
    ThrowGpuWaitTimeout("a GPU priority update (ticket " + std::to_string(awaited) + ")");
  }
  SettledPrioritiesLocked();  // nothing in flight now: sets the deferred leaves
  return true;
}

bool TableGpu::KernelCannotUpdateLocked() const {
  // A TopK heap or min-priority remover keeps priorities in host memory, and
  // so does a table with step priorities (an update sets every step of each
  // trajectory, step_priority_, which the kernel does not write); a staged
  // update's host function may still wait for the priorities (no kernel may
  // queue behind it); a tree the GPU cannot reach.
  const SelectorsOf<PrioritizedSelector> prioritized =
      table_.selectors_.Of<PrioritizedSelector>(Strategy::kPrioritized);
  return table_.selectors_.using_priority().size() != prioritized.size() ||
         !table_.step_priority_.empty() ||
         table_.staged_updates_.load(std::memory_order_acquire) > 0 ||
         std::any_of(prioritized.begin(), prioritized.end(), [](const PrioritizedSelector* p) {
           return p->tree().device_view().nodes == nullptr;
         });
}

bool TableGpu::OtherStreamUpdateInFlightLocked(const void* stream) const {
  return table_.gpu_updates_.OtherStreamInFlight(stream, table_.tickets_);
}

bool TableGpu::OtherStreamMirrorCopyLocked(const void* stream) const {
  return table_.gpu_staging_ != nullptr &&
         table_.gpu_staging_->OtherStreamCopyInFlight(stream, table_.tickets_);
}

void TableGpu::HandDeferredLeavesLocked(uint64_t ticket, GpuUpdate* u, RetiredStaging* retired) {
  u->deferred = nullptr;
  u->deferred_n = 0;
  const std::vector<int64_t>& deferred = table_.gpu_updates_.deferred();
  if (deferred.empty()) return;
  const auto n = static_cast<int64_t>(deferred.size());
  MappedArray<int64_t>* list = nullptr;
  try {
    list = StagingLocked().ListFor(n, ticket, table_.tickets_, retired);
  } catch (const std::bad_alloc&) {
    list = nullptr;
  }
  if (list == nullptr || list->device_data() == nullptr) return;  // the host sets them later
  std::copy(deferred.begin(), deferred.end(), list->data());
  try {
    // Kept aside, not dropped: a caller that cannot enqueue the kernel
    // gives them back (UpdateNotEnqueued).
    table_.gpu_updates_.HandDeferred(ticket, table_.tickets_);
  } catch (const std::bad_alloc&) {
    return;  // still deferred: the host sets them later
  }
  u->deferred = list->device_data();
  u->deferred_n = n;
}

void TableGpu::UpdateEnqueued(uint64_t ticket) {
  MutexLock lock(table_.CheckedMutex());
  table_.gpu_updates_.Enqueued(ticket);
  table_.changed_.notify_all();  // updates waiting for it to be enqueued
}

void TableGpu::UpdateNotEnqueued(uint64_t ticket) {
  MutexLock lock(table_.CheckedMutex());
  table_.gpu_updates_.TakeBack(ticket);
  table_.gpu_updates_.Drop(ticket);
  table_.changed_.notify_all();
}

void TableGpu::WaitForOtherUpdatesLocked(MutexLock& lock, const void* stream) {
  for (;;) {
    if (!table_.changed_.wait_until(lock.native(), table_.GpuWaitDeadline(), [&] {
          table_.mu_.AssertHeld();
          return !table_.gpu_updates_.claimed() || table_.closed();
        })) {
      table_.ThrowGpuWaitTimeout("a host call that waits for an earlier GPU priority update");
    }
    table_.CheckOpenLocked();
    // An update begun and not yet enqueued (its thread launches it without
    // the lock): after it, in the order the two read the trees.
    if (table_.gpu_updates_.AwaitingEnqueue()) {
      if (!table_.changed_.wait_until(lock.native(), table_.GpuWaitDeadline(), [&] {
            table_.mu_.AssertHeld();
            return !table_.gpu_updates_.AwaitingEnqueue() || table_.closed();
          })) {
        table_.ThrowGpuWaitTimeout("an earlier GPU priority update to be enqueued");
      }
      continue;  // the lock was released: look again
    }
    const GpuUpdateLedger::Last last = table_.gpu_updates_.last();
    if (last.ticket == 0 || stream == last.stream) return;
    // Another stream's updates may still be writing: wait for them, then
    // look again (the lock was released).
    if (!table_.OwnPrioritiesLocked()) return;
  }
}

GpuUpdate TableGpu::KernelViewLocked(const SumTree* trees[]) {
  GpuUpdate u{};
  // The kernel writes priorities.
  u.info = const_cast<SlotInfo*>(table_.slots_->device_info());
  u.capacity = table_.spec_.capacity;
  u.slot_mask = (int64_t{1} << table_.key_layout_.slot_bits()) - 1;
  u.report = table_.gpu_report_.device_data(table_.mu_);
  for (const PrioritizedSelector* selector :
       table_.selectors_.Of<PrioritizedSelector>(Strategy::kPrioritized)) {
    const SumTreeView view = selector->tree().device_view();
    u.levels = view.levels;
    std::copy(view.offsets, view.offsets + kSumTreeMaxLevels, u.offsets);
    trees[u.trees] = &selector->tree();
    u.tree[u.trees++] = {const_cast<double*>(view.nodes), nullptr, selector->alpha()};
  }
  return u;
}

void TableGpu::UseMirrorsLocked(MutexLock& lock, uint64_t ticket, const void* stream,
                                const SumTree* const trees[], GpuUpdate* u,
                                MirrorCopies* copies, RetiredStaging* retired) {
  // A copy into the mirrors enqueued on another stream may still run: it
  // could write a node this kernel writes after reading the host's. Wait
  // for it. With this update recorded, no new copy of a Prioritized tree
  // starts on another stream (BeginSample) and host writers wait
  // (OwnPrioritiesLocked) meanwhile.
  const bool copied = table_.WaitForTickets(lock.native(), table_.GpuWaitDeadline(), [&] {
    table_.mu_.AssertHeld();
    return table_.closed() || !OtherStreamMirrorCopyLocked(stream);
  });
  if (table_.closed() || !copied) {
    // Nothing enqueued under this ticket: give it back, and with it the
    // claim on the priorities (earlier updates of this stream stay owed).
    table_.gpu_updates_.Drop(ticket);
    table_.changed_.notify_all();  // updates waiting for it to be enqueued
    table_.tickets_.Return(ticket);
    table_.CheckOpenLocked();  // throws Closed
    table_.ThrowGpuWaitTimeout("a copy into the trees' GPU mirrors on another stream (ticket " +
                               std::to_string(table_.gpu_staging_->last_copy()) + ")");
  }
  // The kernel reads and writes the mirrors, brought up to date first,
  // and writes the host trees too.
  double* mirrors[kMaxPriorityTrees];
  StagingLocked().CopyMirrors(trees, u->trees, ticket, stream, table_.tickets_, copies, mirrors,
                              retired);
  for (int32_t k = 0; k < u->trees; ++k) {
    if (mirrors[k] == nullptr) continue;
    u->tree[k].host_nodes = u->tree[k].nodes;
    u->tree[k].nodes = mirrors[k];
  }
}

uint64_t TableGpu::BeginUpdate(const void* stream, int64_t n, GpuUpdate* update,
                               MirrorCopies* copies, size_t shared_limit) {
  copies->n = 0;
  RetiredStaging retired;  // freed after the lock is released (declared first)
  MutexLock lock(table_.CheckedMutex());
  table_.CheckOpenLocked();
  // Without a Prioritized tree the kernel would only rewrite records, yet
  // every host insert would wait for it (an evicted or published record may
  // be one it writes): staged, the update is applied by a host function in
  // stream order under the lock, and inserts never wait for the GPU.
  if (!table_.selectors_.Has(Strategy::kPrioritized)) return 0;
  uint64_t ticket = 0;
  while (ticket == 0) {
    WaitForOtherUpdatesLocked(lock, stream);
    if (!GpuUpdateFits(n, shared_limit) || table_.slots_->device_info() == nullptr ||
        KernelCannotUpdateLocked()) {
      return 0;
    }
    // No device address for the report: staged.
    if (!table_.gpu_report_.Make(table_.mapped_by_, table_.mu_)) return 0;
    // The ticket first: TakeTicketLocked may release the lock to wait, and a
    // Prioritized tree made meanwhile must be among those the kernel updates.
    ticket = table_.TakeTicketLocked(lock);  // the caller hands it to the device
    // If it waited, what the checks above saw may have changed. An update
    // begun meanwhile and not yet enqueued: wait for it, as above (staged,
    // this update's host function could get on the stream ahead of that
    // kernel and wait for it). A host writer claiming the priorities,
    // another stream's update, a tree the kernel could not reach: staged
    // after all (always correct: a host function in stream order), or Closed.
    if (!table_.closed() && table_.gpu_updates_.AwaitingEnqueue()) {
      table_.tickets_.Return(ticket);
      ticket = 0;
      continue;
    }
    if (table_.closed() || table_.gpu_updates_.claimed() ||
        OtherStreamUpdateInFlightLocked(stream) || KernelCannotUpdateLocked()) {
      table_.tickets_.Return(ticket);
      table_.CheckOpenLocked();
      return 0;
    }
  }
  table_.gpu_updates_.Record(ticket, stream, table_.tickets_);
  const SumTree* trees[kMaxPriorityTrees];
  GpuUpdate u = KernelViewLocked(trees);
  if (MirrorsTreesLocked()) UseMirrorsLocked(lock, ticket, stream, trees, &u, copies, &retired);
  // Last: UseMirrorsLocked may wait and fail, and leaves handed before
  // would be set by no one (and those deferred during its wait go too).
  HandDeferredLeavesLocked(ticket, &u, &retired);
  *update = u;
  return ticket;
}

void Table::DeferError(const std::string& message) { deferred_.Defer(message); }

void Table::RaiseDeferredError() {
  // Every Python method asks this first, some (Table.state) nothing else: an
  // inherited table in a forked child refuses here too, as it does where a
  // call takes the lock.
  if (fork_generation_ != forks::Generation()) [[unlikely]] ThrowForkedCopy();
  // GPU updates refused since the last look: the first one's first bad
  // entry, in the words the host's check uses, and how many more.
  const GpuUpdateReportCell::Failures failures = gpu_report_.TakeFailures();
  if (failures.count > 0) {
    std::string message = "a bad priority";  // details lost to a race (see GpuUpdateReport)
    if (failures.detailed) {
      try {
        CheckPriority(failures.value, "entry " + std::to_string(failures.entry));
      } catch (const InvalidArgument& e) {
        message = e.what();
      }
    }
    for (unsigned long long i = 0; i < failures.count; ++i) DeferError(message);
  }
  // Every eager call asks: with nothing kept, no message is made.
  if (!deferred_.pending()) return;
  deferred_.Raise("a priority update from an earlier GPU program failed and changed nothing: ");
}

}  // namespace gearjax
