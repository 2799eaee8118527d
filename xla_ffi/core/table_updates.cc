// Table's priority updates (see table.h): on the host, staged from a GPU
// stream, or applied by a GPU kernel (BeginGpuUpdate, and the protocol that
// keeps the host out of the priorities meanwhile: OwnPrioritiesLocked); and
// the errors deferred from compiled calls.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "limits.h"
#include "prefetch.h"
#include "random.h"
#include "table.h"
#include "table_internal.h"

namespace gearjax {

int64_t Table::UpdatePriorities(const int64_t* keys, const double* priorities, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    if (!ValidPriority(priorities[i])) CheckPriority(priorities[i], "entry " + std::to_string(i));
  }
  auto lock = Lock();
  CheckOpenLocked();
  OwnPrioritiesLocked();
  update_before_.clear();
  update_after_.clear();
  constexpr int64_t kAhead = 32;  // records prefetched ahead of the one looked up (see Select)
  for (int64_t i = 0; i < count; ++i) {
    if (i + kAhead < count) {
      if (const SlotInfo* next = slots_->Address(keys[i + kAhead])) PrefetchForRead(next);
    }
    const int64_t slot = slots_->Find(keys[i]);
    if (slot < 0) {
      if (keys[i] >= 0) ++skipped_updates_;
      continue;
    }
    SlotInfo& info = (*slots_)[slot];
    update_before_.push_back({slot, info.key, info.length, info.priority});
    update_after_.push_back(priorities[i] + 0.0);  // -0.0 -> 0.0
    positive_ += (update_after_.back() > 0) - (info.priority > 0);
    info.priority = update_after_.back();
  }
  const int64_t updated = static_cast<int64_t>(update_before_.size());
  for (Selector* selector : priority_selectors_) {
    selector->UpdatePriorities(update_before_.data(), update_after_.data(), updated);
  }
  counters_.priority_updates += updated;
  return updated;
}

bool Table::WaitsForStagedUpdates(const SampleRequest& r) const {
  if (!WeighsByPriority(r)) return false;
  if (staged_updates_.load(std::memory_order_acquire) == 0 &&
      gpu_report_.load(std::memory_order_acquire) == nullptr) {
    return false;  // never updated on the GPU, nothing staged
  }
  auto lock = Lock();
  const bool in_flight = staged_updates_.load(std::memory_order_acquire) > 0 ||
                         (gpu_update_last_ != 0 && tickets_.InFlight(gpu_update_last_));
  return in_flight && PositiveLocked() == 0;
}

int64_t Table::PositiveLocked() const {
  const GpuUpdateReport* report = gpu_report_.load(std::memory_order_acquire);
  if (report == nullptr) return positive_;
  // Two's complement: the kernels add negative changes as large unsigned ones.
  return positive_ + static_cast<int64_t>(__atomic_load_n(&report->positive, __ATOMIC_ACQUIRE));
}

GpuUpdateReport Table::GpuUpdateCounts() const {
  GpuUpdateReport counts{};
  if (const GpuUpdateReport* report = gpu_report_.load(std::memory_order_acquire)) {
    counts.updated = __atomic_load_n(&report->updated, __ATOMIC_ACQUIRE);
    counts.skipped = __atomic_load_n(&report->skipped, __ATOMIC_ACQUIRE);
    counts.positive = __atomic_load_n(&report->positive, __ATOMIC_ACQUIRE);
    counts.failed = __atomic_load_n(&report->failed, __ATOMIC_ACQUIRE);
  }
  return counts;
}

bool Table::OwnPrioritiesLocked() {
  if (gpu_update_last_ == 0) return false;
  if (!tickets_.InFlight(gpu_update_last_)) {
    gpu_update_last_ = 0;  // and every earlier one: one stream at a time, in order
    return false;
  }
  // The caller's lock, borrowed to wait (and handed back still locked).
  std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
  ++priority_claims_;  // BeginGpuUpdate waits meanwhile: no new ticket to wait for
  WaitForTickets(lock, Clock::time_point::max(),
                 [&] { return closed() || !tickets_.InFlight(gpu_update_last_); });
  --priority_claims_;
  lock.release();
  changed_.notify_all();
  CheckOpenLocked();
  gpu_update_last_ = 0;
  return true;
}

uint64_t Table::BeginGpuUpdate(const void* stream, int64_t n, GpuUpdate* update,
                               MirrorCopies* copies) {
  copies->n = 0;
  auto lock = Lock();
  CheckOpenLocked();
  for (;;) {
    changed_.wait(lock, [&] { return priority_claims_ == 0 || closed(); });
    CheckOpenLocked();
    if (gpu_update_last_ == 0 || stream == gpu_update_stream_) break;
    // Another stream's updates may still be writing: wait for them, then
    // look again (the lock was released).
    if (!OwnPrioritiesLocked()) break;
  }
  const bool staged = n > kMaxGpuUpdateKeys || slots_->device_info() == nullptr ||
                      priority_selectors_.size() != prioritized_.size() ||
                      staged_updates_.load(std::memory_order_acquire) > 0;
  if (staged) return 0;
  GpuUpdateReport* report = gpu_report_.load(std::memory_order_relaxed);
  if (report == nullptr) {
    gpu_report_owner_ = std::make_unique<MappedArray<GpuUpdateReport>>(1, spec_.gpu_mapped);
    if (gpu_report_owner_->device_data() == nullptr) {
      gpu_report_owner_.reset();
      return 0;
    }
    report = &(*gpu_report_owner_)[0];
    gpu_report_.store(report, std::memory_order_release);
  }
  GpuUpdate u{};
  u.info = const_cast<SlotInfo*>(slots_->device_info());  // the kernel writes priorities
  u.capacity = spec_.capacity;
  u.slot_mask = (int64_t{1} << key_layout_.slot_bits()) - 1;
  u.report = const_cast<GpuUpdateReport*>(gpu_report_owner_->device_data());
  const SumTree* trees[kMaxPriorityTrees];
  for (const auto& selector : prioritized_) {
    const SumTreeView view = selector->tree().device_view();
    if (view.nodes == nullptr) return 0;
    u.levels = view.levels;
    std::copy(view.offsets, view.offsets + kSumTreeMaxLevels, u.offsets);
    trees[u.trees] = &selector->tree();
    u.tree[u.trees++] = {const_cast<double*>(view.nodes), nullptr, selector->alpha()};
  }
  const uint64_t ticket = TakeTicketLocked(lock);  // the caller hands it to the device
  gpu_update_last_ = std::max(gpu_update_last_, ticket);  // (TakeTicketLocked may wait)
  gpu_update_stream_ = stream;
  if (MirrorsTreesLocked()) {
    // A copy into the mirrors enqueued on another stream may still run: it
    // could write a node this kernel writes after reading the host's. Wait
    // for it. With gpu_update_last_ set, no new copy of a Prioritized tree
    // starts on another stream (BeginGpuSample) and host writers wait
    // (OwnPrioritiesLocked) meanwhile.
    const auto foreign_copy = [&] {
      return mirror_copy_last_ != 0 &&
             (stream != mirror_copy_stream_ || mirror_copy_streams_mixed_) &&
             tickets_.InFlight(mirror_copy_last_);
    };
    WaitForTickets(lock, Clock::time_point::max(), [&] { return closed() || !foreign_copy(); });
    if (closed()) {
      tickets_.Return(ticket);
      CheckOpenLocked();  // throws Closed
    }
    // The kernel reads and writes the mirrors, brought up to date first,
    // and writes the host trees too.
    double* mirrors[kMaxPriorityTrees];
    CopyMirrorsLocked(trees, u.trees, ticket, stream, copies, mirrors);
    for (int32_t k = 0; k < u.trees; ++k) {
      if (mirrors[k] == nullptr) continue;
      u.tree[k].host_nodes = u.tree[k].nodes;
      u.tree[k].nodes = mirrors[k];
    }
  }
  *update = u;
  return ticket;
}

void Table::DeferError(const std::string& message) { deferred_.Defer(message); }

void Table::RaiseDeferredError() {
  // GPU updates refused since the last look: the first one's first bad
  // entry, in the words the host's check uses, and how many more.
  if (GpuUpdateReport* report = gpu_report_.load(std::memory_order_acquire)) {
    const unsigned long long failed = __atomic_load_n(&report->failed, __ATOMIC_ACQUIRE);
    unsigned long long raised = gpu_failures_raised_.load(std::memory_order_relaxed);
    if (failed != raised && gpu_failures_raised_.compare_exchange_strong(raised, failed)) {
      std::string message = "a bad priority";  // details lost to a race (see GpuUpdateReport)
      if (__atomic_load_n(&report->held, __ATOMIC_ACQUIRE) != 0) {
        const long long entry = report->bad_entry;
        const double value = report->bad_value;
        __atomic_store_n(&report->held, 0ull, __ATOMIC_RELEASE);  // the next refusal's place
        try {
          CheckPriority(value, "entry " + std::to_string(entry));
        } catch (const InvalidArgument& e) {
          message = e.what();
        }
      }
      for (unsigned long long i = raised; i < failed; ++i) DeferError(message);
    }
  }
  deferred_.Raise("a priority update from an earlier GPU program failed and changed nothing: ");
}

}  // namespace gearjax
