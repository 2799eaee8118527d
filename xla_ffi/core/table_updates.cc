// Table's priority updates (see table.h), staged while GPU samples are in
// flight, and the errors deferred from compiled calls.
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
  std::lock_guard<std::mutex> lock(mu_);
  CheckOpenLocked();
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
  if (staged_updates_.load(std::memory_order_acquire) == 0) return false;
  if (r.strategy != Strategy::kPrioritized || r.alpha <= 0) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return positive_ == 0;
}

void Table::DeferError(const std::string& message) { deferred_.Defer(message); }

void Table::RaiseDeferredError() {
  deferred_.Raise("a priority update from an earlier GPU program failed and changed nothing: ");
}

}  // namespace gearjax
