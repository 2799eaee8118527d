// Reading a table's items (see table.h): steps, pinned items, restore and
// stats.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "core/limits.h"
#include "core/prefetch.h"
#include "core/random.h"
#include "core/selectors/prioritized.h"
#include "core/selectors/step_prioritized.h"
#include "core/table/table.h"
#include "core/table/table_internal.h"

namespace gearjax {

void Table::ReadSteps(int c, int64_t slot, int64_t steps, void* dst) const {
  if (c < 0 || c >= num_columns()) throw InvalidArgument("no such column");
  if (slot < 0 || slot >= spec_.capacity || steps < 0 || steps > spec_.max_length) {
    throw InvalidArgument("slot or step count out of range");
  }
  arena_->Read(dst, StepOffset(c, slot, 0), static_cast<size_t>(steps * step_bytes(c)));
}

std::vector<ItemInfo> Table::PinItems(const int64_t* keys, int64_t count,
                                      std::vector<double>* step_priorities) {
  MutexLock lock(CheckedMutex());
  std::vector<ItemInfo> items = PinItemsLocked(keys, count);
  if (step_priorities != nullptr) *step_priorities = StepPrioritiesLocked(items);
  return items;
}

std::vector<double> Table::StepPrioritiesLocked(const std::vector<ItemInfo>& items) const {
  std::vector<double> steps;
  if (!spec_.step_priorities) return steps;
  int64_t total = 0;
  for (const ItemInfo& item : items) total += item.length;
  steps.reserve(static_cast<size_t>(total));
  for (const ItemInfo& item : items) {
    const auto first = step_priority_.begin() + item.slot * spec_.max_length;
    steps.insert(steps.end(), first, first + item.length);
  }
  return steps;
}

std::vector<ItemInfo> Table::PinItemsLocked(const int64_t* keys, int64_t count) {
  CheckOpenLocked();
  OwnPrioritiesLocked();  // the priorities as the programs before left them
  std::vector<ItemInfo> items;
  auto pin = [&](int64_t slot) {
    mu_.AssertHeld();
    const SlotInfo& info = (*slots_)[slot];
    items.push_back(
        {info.key, slot, info.length, info.priority, stamps_[slot], times_sampled_[slot]});
    slots_->Pin(slot);
  };
  if (keys == nullptr) {
    items.reserve(static_cast<size_t>(live_));
    for (int64_t s = order_->Oldest(); s >= 0; s = order_->Next(s)) pin(s);
  } else {
    for (int64_t i = 0; i < count; ++i) {
      const int64_t slot = slots_->Find(keys[i]);
      if (slot >= 0) pin(slot);
    }
  }
  return items;
}

Snapshot Table::PinSnapshot() {
  MutexLock lock(CheckedMutex());
  Snapshot snapshot;
  snapshot.items = PinItemsLocked(nullptr, 0);
  snapshot.step_priorities = StepPrioritiesLocked(snapshot.items);
  snapshot.counters = counters_;
  snapshot.counters.priority_updates += static_cast<int64_t>(GpuUpdateCounts().updated);
  snapshot.free_slots = slots_->FreeInOrder();
  // Reserved slots go last, lowest last (inserts take from the back): a
  // restored table's next inserts take them first, as the writers did.
  int64_t reserved = writers_;
  for (int64_t slot = spec_.capacity - 1; slot >= 0 && reserved > 0; --slot) {
    if ((*slots_)[slot].state != SlotState::kWriting) continue;
    snapshot.free_slots.push_back(slot);
    --reserved;
  }
  return snapshot;
}

void Table::UnpinSlots(const std::vector<int64_t>& slots) {
  MutexLock lock(CheckedMutex());
  for (int64_t slot : slots) slots_->Unpin(slot);
  changed_.notify_all();
}

void Table::RestoreTimesSampled(int64_t key, int64_t times_sampled) {
  MutexLock lock(CheckedMutex());
  CheckOpenLocked();
  const int64_t slot = slots_->Find(key);
  if (slot < 0) throw InvalidArgument("restored key " + std::to_string(key) + " is not stored");
  const int64_t limit = spec_.max_times_sampled;
  if (times_sampled < 0 || (limit == 0 ? times_sampled != 0 : times_sampled >= limit)) {
    throw InvalidArgument("restored times_sampled " + std::to_string(times_sampled) +
                          " is outside [0, max_times_sampled=" + std::to_string(limit) + ")");
  }
  times_sampled_[slot] = times_sampled;
}

std::vector<int64_t> Table::FreeSlots() const {
  MutexLock lock(CheckedMutex());
  CheckOpenLocked();
  return slots_->FreeInOrder();
}

void Table::RestoreState(const Counters& counters, const std::vector<int64_t>& free_slots) {
  MutexLock lock(CheckedMutex());
  CheckOpenLocked();
  OwnPrioritiesLocked();
  if (counters.next_sequence < counters_.next_sequence ||
      counters.next_sequence - 1 > key_layout_.max_sequence()) {
    throw InvalidArgument("restored next_sequence is below a key already in the table or "
                          "beyond the key space");
  }
  if (counters.inserts < 0 || counters.evictions < 0 || counters.priority_updates < 0 ||
      !(counters.samples >= 0) || !std::isfinite(counters.samples)) {
    throw InvalidArgument("restored counters must be finite and >= 0");
  }
  std::vector<bool> seen(static_cast<size_t>(spec_.capacity), false);
  for (int64_t slot : free_slots) {
    if (slot < 0 || slot >= spec_.capacity || seen[slot] ||
        (*slots_)[slot].state != SlotState::kFree) {
      throw InvalidArgument("restored free slots do not match the slots in use");
    }
    seen[slot] = true;
  }
  if (static_cast<int64_t>(free_slots.size()) != spec_.capacity - live_ - writers_) {
    throw InvalidArgument("restored free slots do not match the slots in use");
  }
  counters_ = counters;
  // Stats add what GPU updates counted (GpuUpdateCounts) to the host's count.
  counters_.priority_updates -= static_cast<int64_t>(GpuUpdateCounts().updated);
  slots_->SetFree(free_slots);
  changed_.notify_all();
}

std::vector<double> Table::Alphas(Strategy strategy) const {
  MutexLock lock(CheckedMutex());
  std::vector<double> alphas;
  if (strategy == Strategy::kPrioritizedSteps) {
    for (const StepPrioritizedSelector* selector :
         selectors_.Of<StepPrioritizedSelector>(Strategy::kPrioritizedSteps)) {
      alphas.push_back(selector->alpha());
    }
    return alphas;
  }
  if (strategy != Strategy::kPrioritized) throw InvalidArgument("no alphas for that strategy");
  for (const PrioritizedSelector* selector :
       selectors_.Of<PrioritizedSelector>(Strategy::kPrioritized)) {
    alphas.push_back(selector->alpha());
  }
  return alphas;
}

Stats Table::GetStats() const {
  MutexLock lock(CheckedMutex());
  int64_t bytes_per_step = 0;
  for (const ColumnSpec& c : spec_.columns) bytes_per_step += c.step_bytes;
  Stats s;
  s.size = live_;
  s.capacity = spec_.capacity;
  s.max_length = spec_.max_length;
  s.num_steps = num_steps_;
  s.writers = writers_;
  s.pinned_slots = released_ ? 0 : slots_->pinned();
  s.samples_in_flight = tickets_.in_flight();
  const GpuUpdateReport gpu = GpuUpdateCounts();
  s.counters = counters_;
  s.counters.priority_updates += static_cast<int64_t>(gpu.updated);
  s.bytes_reserved = released_ ? 0 : static_cast<int64_t>(arena_->bytes());
  s.bytes_used = num_steps_ * bytes_per_step;
  s.seconds_alive = std::chrono::duration<double>(Clock::now() - created_at_).count();
  for (const PrioritizedSelector* selector :
       selectors_.Of<PrioritizedSelector>(Strategy::kPrioritized)) {
    s.alphas.push_back(selector->alpha());
  }
  s.skipped_updates = skipped_updates_ + static_cast<int64_t>(gpu.skipped);
  return s;
}

}  // namespace gearjax
