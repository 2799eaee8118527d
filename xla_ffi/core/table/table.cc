// The trajectory table (see table.h for the invariants): construction,
// closing, and the selectors it keeps. The rest of Table's methods live beside
// it by seam: table_insert.cc, table_sample.cc, table_shard.cc,
// table_updates.cc, table_gpu_updates.cc, table_items.cc; the GPU side's,
// TableGpu's (table_gpu.h), in table_gpu_sample.cc and table_gpu_updates.cc.
#include "core/table/table.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "core/gpu/gpu_completions.h"
#include "core/gpu/gpu_staging.h"
#include "core/interrupts.h"
#include "core/limits.h"
#include "core/prefetch.h"
#include "core/random.h"
#include "core/selectors/length_buckets.h"
#include "core/selectors/length_index.h"
#include "core/table/table_internal.h"

namespace gearjax {

using table_internal::Number;

void CheckPriority(double priority, const std::string& what) {
  if (IsSubnormal(priority)) {
    throw InvalidArgument(what + " is " + Number(priority) +
                          ", a subnormal float64; priorities are 0 or in [" +
                          Number(kMinPriority) + ", " + Number(kMaxPriority) + "]");
  }
  if (!(priority >= 0.0 && priority <= kMaxPriority)) {
    throw InvalidArgument(what + " is " + Number(priority) +
                          "; priorities must be finite, >= 0 and <= " + Number(kMaxPriority) +
                          " (1e30 as a float32)");
  }
}

Table::Table(TableSpec spec)
    : spec_(std::move(spec)),
      layout_(spec_.columns, spec_.capacity, spec_.max_length),
      key_layout_(spec_.capacity, spec_.key_bits),
      limiter_(spec_.limiter, spec_.capacity),
      created_at_(Clock::now()) {
  CheckRemover(static_cast<int64_t>(spec_.remover));
  if (!(spec_.slot_wait_seconds >= 0 && spec_.slot_wait_seconds <= kMaxTimeoutSeconds)) {
    throw InvalidArgument("slot_wait_seconds must be in [0, 1e9]");
  }
  if (spec_.max_times_sampled < 0 || spec_.max_times_sampled > kMaxBatch) {
    throw InvalidArgument("max_times_sampled must be in [0, 2**31 - 1] (0: unlimited), got " +
                          std::to_string(spec_.max_times_sampled));
  }
  arena_ = std::make_unique<Arena>(layout_.arena_bytes(), spec_.gpu_mapped, spec_.on_device,
                                   spec_.device);
  for (int c = 0; c < num_columns(); ++c) {
    arena_->Write(layout_.pad_offset(c), spec_.columns[c].pad_step.data(),
                  static_cast<size_t>(step_bytes(c)));
  }
  slots_ = std::make_unique<Slots>(spec_.capacity, spec_.gpu_mapped, spec_.key_bits);
  // The selection state is mapped by the allocator current now (Slots,
  // UniformSelector; trees made later take the one current then); a host
  // arena by the same one when it got mapped memory.
  const MappedAllocator* state_mapped = slots_->device_info() != nullptr ? GetMappedAllocator()
                                                                         : nullptr;
  mapped_by_ = arena_->on_device() || arena_->mapped_by() == state_mapped ? state_mapped : nullptr;
  device_memory_ = arena_->device_memory();
  device_ordinal_ = arena_->device_ordinal();
  if (spec_.step_priorities) {
    if (spec_.capacity > kMaxStepPriorities / spec_.max_length) {
      throw InvalidArgument("step_priorities keeps capacity * max_length = " +
                            std::to_string(spec_.capacity) + " * " +
                            std::to_string(spec_.max_length) + " priorities, over 2^33");
    }
    step_priority_.assign(static_cast<size_t>(spec_.capacity * spec_.max_length), 0.0);
  }
  stamps_.assign(static_cast<size_t>(spec_.capacity), -1);
  times_sampled_.assign(static_cast<size_t>(spec_.capacity), 0);
  freed_at_.assign(static_cast<size_t>(spec_.capacity), 0);
  order_ = &selectors_.Keep(std::make_unique<InsertionOrder>(spec_.capacity));
  SamplingSelectorLocked(Strategy::kUniform, 0.0);  // every table draws Uniform's live bitmap
  if (spec_.remover == Remover::kMinPriority) {
    min_heap_ = &selectors_.Keep(std::make_unique<MinPriorityHeap>(spec_.capacity));
  }
}

Table::~Table() { WaitForDeviceTickets(); }

void Table::WaitForDeviceTickets() {
  // Kernels handed tickets (TableGpu::HandToDevice) may still read the arena and the
  // selection state: they were enqueued by handlers that no longer hold the
  // table. Wait for the GPU to say they are done; if it never does (a hung
  // or failed stream), keep the memory rather than free it under a kernel.
  if (completions_.load(std::memory_order_acquire) == nullptr) return;
  MutexLock lock(mu_);  // not CheckedMutex(): a destructor must not throw
  // Inside a stream callback (a sharded sample's host function dropped the
  // last reference) the kernels still to report may be queued behind the
  // callback itself: do not wait there.
  const auto deadline = Clock::now() + std::chrono::seconds(InStreamCallback() ? 0 : 60);
  if (WaitForTickets(lock.native(), deadline, [&] { return tickets_.on_device() == 0; })) return;
  // Kept for the life of the process (reachable, so no leak checker flags it).
  static std::mutex kept_mu;
  static std::vector<std::shared_ptr<void>> kept;
  std::lock_guard<std::mutex> keep(kept_mu);
  for (std::shared_ptr<void>& block : TakeMemoryLocked()) kept.push_back(std::move(block));
  kept.push_back(std::shared_ptr<GpuCompletions>(std::move(completions_owner_)));
  kept.push_back(gpu_report_.Release(mu_));
}

bool Table::WaitWithinLimiterTimeoutLocked(MutexLock& lock, const std::function<bool()>& ready,
                                           const std::string& what) {
  const uint64_t seen = interrupts::Baseline();  // before the wait can be seen
  const table_internal::CountedWait counted(waiting_);
  const auto deadline =
      Clock::now() + std::chrono::duration<double>(spec_.limiter.timeout_seconds);
  const bool done = interrupts::WaitInterruptibly(
      changed_, lock.native(), deadline,
      [&] {
        mu_.AssertHeld();
        return closed_ || ready();
      },
      what, seen);
  CheckOpenLocked();
  return done;
}

namespace {

Timeout TicketPlaceTimeout(double seconds) {
  return Timeout("a GPU sample " + std::to_string(GpuCompletions::kSize) +
                 " samples earlier has not finished in " + table_internal::Number(seconds) +
                 " s (a GPU stream that does not progress?)");
}

}  // namespace

uint64_t Table::TakeTicketLocked(MutexLock& lock) {
  const uint64_t ticket = tickets_.Take();
  if (completions_.load(std::memory_order_relaxed) == nullptr) return ticket;
  // Almost never waits: only when GpuCompletions::kSize later tickets were
  // taken while an earlier one in the same place is still in flight.
  if (!WaitForTickets(lock.native(), TicketPlaceDeadline(), [&] {
        mu_.AssertHeld();
        return closed_ || tickets_.SharesPlaceWith(ticket, GpuCompletions::kSize) == 0;
      })) {
    tickets_.Return(ticket);
    throw TicketPlaceTimeout(spec_.slot_wait_seconds);
  }
  return ticket;
}

bool Table::TicketPlaceFreeLocked() {
  return completions_.load(std::memory_order_relaxed) == nullptr ||
         tickets_.SharesPlaceWith(tickets_.next(), GpuCompletions::kSize) == 0;
}

void Table::WaitForTicketPlaceLocked(MutexLock& lock, Clock::time_point deadline) {
  if (!WaitForTickets(lock.native(), deadline, [&] {
        mu_.AssertHeld();
        return closed_ || TicketPlaceFreeLocked();
      })) {
    throw TicketPlaceTimeout(spec_.slot_wait_seconds);
  }
}

Table::Clock::time_point Table::TicketPlaceDeadline() const {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(spec_.slot_wait_seconds));
}

std::string Table::Describe(int64_t handle) const {
  const std::string id = "(handle " + std::to_string(handle) + ")";
  return spec_.name.empty() ? "table " + id : "table '" + spec_.name + "' " + id;
}

void Table::ThrowForkedCopy() const {
  throw Closed(forks::ForkedCopyMessage(spec_.name.empty() ? std::string("this table")
                                                           : "table '" + spec_.name + "'",
                                        fork_generation_));
}

void Table::CheckOpenLocked() const {
  if (closed_) throw Closed("the table is closed");
}

bool Table::closed() const { return closed_.load(std::memory_order_acquire); }

bool Table::InsideLocked() const {
  return slots_->pinned() > 0 || writers_ > 0 || holders_ > 0 || tickets_.in_flight() > 0;
}

bool Table::Hold() {
  MutexLock lock(CheckedMutex());
  if (closed_.load(std::memory_order_acquire)) return false;
  ++holders_;
  return true;
}

void Table::Release() {
  MutexLock lock(CheckedMutex());
  if (holders_ == 0) throw std::logic_error("Table::Release without a Hold");
  --holders_;
  changed_.notify_all();  // a Close may be waiting for the last one out
}

int64_t Table::waiting() const {
  MutexLock lock(CheckedMutex());
  return waiting_;
}

bool Table::Close(double wait_seconds) {
  std::vector<std::shared_ptr<void>> memory;
  {
    MutexLock lock(CheckedMutex());
    closed_.store(true, std::memory_order_release);
    changed_.notify_all();
    if (released_) return true;
    const auto deadline = Clock::now() + std::chrono::duration<double>(
                                             std::clamp(wait_seconds, 0.0, kMaxTimeoutSeconds));
    if (!WaitForTickets(lock.native(), deadline, [&] {
      mu_.AssertHeld();
      return !InsideLocked();
    })) return false;
    memory = TakeMemoryLocked();
  }
  // Freed without the mutex: freeing pinned or GPU memory may wait for the
  // GPU, whose stream may itself be waiting for the mutex in a staged
  // priority update's host function (staged_update.h).
  for (std::shared_ptr<void>& block : memory) block.reset();  // in the order taken
  return true;
}

std::vector<std::shared_ptr<void>> Table::TakeMemoryLocked() {
  std::vector<std::shared_ptr<void>> memory;
  auto take = [&](auto& owner) {
    if (owner != nullptr) memory.emplace_back(std::move(owner));
  };
  for (std::shared_ptr<void>& selector : selectors_.TakeAll()) {
    memory.push_back(std::move(selector));
  }
  order_ = nullptr;
  min_heap_ = nullptr;
  lengths_ = nullptr;
  length_buckets_ = nullptr;
  take(gpu_staging_);
  take(slots_);
  take(arena_);
  arena_ = std::make_unique<Arena>(0, /*gpu_mapped=*/false, /*on_device=*/false);  // empty
  live_ = num_steps_ = positive_ = 0;
  released_ = true;
  return memory;
}

LimiterState Table::LimiterStateLocked() const {
  return {live_, writers_, counters_.inserts, counters_.samples};
}

Item Table::ItemLocked(int64_t slot) const {
  const SlotInfo& info = (*slots_)[slot];
  return {slot, info.key, info.length, info.priority};
}

// Each lazily made selector is filled with the live items, oldest first,
// before it is kept (a throw leaves the table as it was), then kept up to
// date like the others.
void Table::FillLocked(Selector& selector) const {
  for (int64_t s = order_->Oldest(); s >= 0; s = order_->Next(s)) selector.Insert(ItemLocked(s));
}

SelectorContext Table::SelectorContextLocked() const {
  return {spec_.capacity, spec_.max_length, spec_.gpu_mapped,
          spec_.step_priorities ? step_priority_.data() : nullptr, &(*slots_)[0]};
}

SamplingSelector& Table::SamplingSelectorLocked(Strategy strategy, double alpha) {
  std::unique_ptr<SamplingSelector> made;
  do {
    if (SamplingSelector* found = selectors_.Find(strategy, alpha)) return *found;
    made = selectors_.Make(strategy, alpha, SelectorContextLocked());
    // One that keeps priorities is filled from the records': first no GPU
    // update may be writing them (the lock may be released meanwhile: look
    // again). Select, Totals, Remote and Tops own the priorities before
    // they get here; TableGpu::BeginSample does not, and a Prioritized tree it
    // makes waits here.
  } while (made->UsesPriority() && OwnPrioritiesLocked());
  FillLocked(*made);
  return selectors_.Add(strategy, alpha, std::move(made));
}

LengthIndex& Table::LengthIndexLocked() {
  if (lengths_ == nullptr) {
    auto index = std::make_unique<LengthIndex>(spec_.max_length);
    FillLocked(*index);
    lengths_ = &selectors_.Keep(std::move(index));
  }
  return *lengths_;
}

LengthBuckets& Table::LengthBucketsLocked() {
  if (length_buckets_ == nullptr) {
    auto buckets = std::make_unique<LengthBuckets>(spec_.capacity, spec_.max_length);
    FillLocked(*buckets);
    length_buckets_ = &selectors_.Keep(std::move(buckets));
  }
  return *length_buckets_;
}

}  // namespace gearjax
