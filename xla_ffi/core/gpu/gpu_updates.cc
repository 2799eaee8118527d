// The GPU priority updates' report and ledger (see gpu_updates.h).
#include "core/gpu/gpu_updates.h"

#include <algorithm>

namespace gearjax {

bool GpuUpdateReportCell::Make(const MappedAllocator* mapped,
                               [[maybe_unused]] const Mutex& owner_mu) {
  if (get() != nullptr) return true;
  auto made = std::make_unique<MappedArray<GpuUpdateReport>>(1, mapped);
  if (made->device_data() == nullptr) return false;  // not GPU-mapped: no kernel can add to it
  owner_ = std::move(made);
  report_.store(&(*owner_)[0], std::memory_order_release);
  return true;
}

GpuUpdateReport GpuUpdateReportCell::Counts() const {
  GpuUpdateReport counts{};
  if (const GpuUpdateReport* report = get()) {
    counts.updated = __atomic_load_n(&report->updated, __ATOMIC_ACQUIRE);
    counts.skipped = __atomic_load_n(&report->skipped, __ATOMIC_ACQUIRE);
    counts.positive = __atomic_load_n(&report->positive, __ATOMIC_ACQUIRE);
    counts.failed = __atomic_load_n(&report->failed, __ATOMIC_ACQUIRE);
  }
  return counts;
}

int64_t GpuUpdateReportCell::PositiveChange() const {
  const GpuUpdateReport* report = get();
  if (report == nullptr) return 0;
  // Two's complement: the kernels add negative changes as large unsigned ones.
  return static_cast<int64_t>(__atomic_load_n(&report->positive, __ATOMIC_ACQUIRE));
}

GpuUpdateReportCell::Failures GpuUpdateReportCell::TakeFailures() {
  Failures failures;
  GpuUpdateReport* report = report_.load(std::memory_order_acquire);
  if (report == nullptr) return failures;
  const unsigned long long failed = __atomic_load_n(&report->failed, __ATOMIC_ACQUIRE);
  unsigned long long taken = taken_failures_.load(std::memory_order_relaxed);
  if (failed == taken || !taken_failures_.compare_exchange_strong(taken, failed)) {
    return failures;  // none new, or another caller took them
  }
  failures.count = failed - taken;
  // Held details (1) are claimed (2) by one taker, read, then freed (0) for
  // the next refusal's: two takers never read details a kernel writes
  // meanwhile, nor free details the other has not read. Kernels write only
  // where they read 0 (update_block.h update_report::HoldDetails).
  unsigned long long held = 1;
  if (__atomic_compare_exchange_n(&report->held, &held, 2ull, false, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE)) {
    failures.detailed = true;
    failures.entry = report->bad_entry;
    failures.value = report->bad_value;
    __atomic_store_n(&report->held, 0ull, __ATOMIC_RELEASE);  // the next refusal's place
  }
  return failures;
}

GpuUpdateLedger::Last GpuUpdateLedger::last() const {
  const auto latest = std::max_element(
      begun_.begin(), begun_.end(),
      [](const Begun& a, const Begun& b) { return a.ticket < b.ticket; });
  if (latest == begun_.end()) return {};
  return {latest->ticket, latest->stream};
}

bool GpuUpdateLedger::InFlight(SampleTickets& tickets) const {
  return std::any_of(begun_.begin(), begun_.end(),
                     [&](const Begun& b) { return tickets.InFlight(b.ticket); });
}

bool GpuUpdateLedger::OtherStreamInFlight(const void* stream, SampleTickets& tickets) const {
  return std::any_of(begun_.begin(), begun_.end(), [&](const Begun& b) {
    return b.stream != stream && tickets.InFlight(b.ticket);
  });
}

bool GpuUpdateLedger::AwaitingEnqueue() const {
  return std::any_of(begun_.begin(), begun_.end(), [](const Begun& b) { return !b.enqueued; });
}

void GpuUpdateLedger::Record(uint64_t ticket, const void* stream, SampleTickets& tickets) {
  // Those that ended are forgotten here: a stream that always has an update
  // in flight never reaches a Forget, and the list stays as short as that.
  std::erase_if(begun_, [&](const Begun& b) { return !tickets.InFlight(b.ticket); });
  begun_.push_back({ticket, stream, false});
}

void GpuUpdateLedger::Enqueued(uint64_t ticket) {
  for (Begun& b : begun_) {
    if (b.ticket == ticket) b.enqueued = true;
  }
}

void GpuUpdateLedger::Drop(uint64_t ticket) {
  std::erase_if(begun_, [&](const Begun& b) { return b.ticket == ticket; });
}

void GpuUpdateLedger::HandDeferred(uint64_t ticket, SampleTickets& tickets) {
  std::erase_if(handed_, [&](const Handed& h) { return !tickets.InFlight(h.ticket); });
  if (deferred_.empty()) return;
  handed_.push_back({ticket, {}});
  handed_.back().slots.swap(deferred_);  // deferred_ left empty
}

void GpuUpdateLedger::TakeBack(uint64_t ticket) {
  const auto it = std::find_if(handed_.begin(), handed_.end(),
                               [&](const Handed& h) { return h.ticket == ticket; });
  if (it == handed_.end()) return;
  // Before the leaves deferred since: the order the host would set them in.
  deferred_.insert(deferred_.begin(), it->slots.begin(), it->slots.end());
  handed_.erase(it);
}

int64_t GpuUpdateLedger::handed() const {
  int64_t n = 0;
  for (const Handed& h : handed_) n += static_cast<int64_t>(h.slots.size());
  return n;
}

}  // namespace gearjax
