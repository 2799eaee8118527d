// Table's priority updates on the host (see table.h): per trajectory and per
// step. Those staged from a GPU stream or applied by a GPU kernel, and what
// keeps the host out of the priorities meanwhile, are table_gpu_updates.cc's.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/limits.h"
#include "core/prefetch.h"
#include "core/random.h"
#include "core/selectors/step_prioritized.h"
#include "core/table/table.h"
#include "core/table/table_internal.h"

namespace gearjax {

int64_t Table::UpdatePriorities(const int64_t* keys, const double* priorities, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    if (!ValidPriority(priorities[i])) CheckPriority(priorities[i], "entry " + std::to_string(i));
  }
  MutexLock lock(CheckedMutex());
  CheckOpenLocked();
  OwnPrioritiesLocked();
  // The keys' slots first, then what the writes allocate, then the writes:
  // an update too large for memory (std::bad_alloc) changes nothing, and the
  // scratch the table and its selectors keep grows with the live keys only.
  constexpr int64_t kAhead = 32;  // records prefetched ahead of the one looked up (see Select)
  const bool keeps_steps = !step_priority_.empty();
  std::vector<std::pair<int64_t, int64_t>> found;  // (entry, slot), in entry order
  found.reserve(static_cast<size_t>(count));
  int64_t skipped = 0, steps = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (i + kAhead < count) {
      if (const SlotInfo* next = slots_->Address(keys[i + kAhead])) PrefetchForRead(next);
    }
    const int64_t slot = slots_->Find(keys[i]);
    if (slot < 0) {
      skipped += keys[i] >= 0;
      continue;
    }
    found.push_back({i, slot});
    if (keeps_steps) steps += (*slots_)[slot].length;
  }
  ReserveUpdateLocked(static_cast<int64_t>(found.size()), steps);  // each item sets its steps
  skipped_updates_ += skipped;
  for (const auto& [i, slot] : found) {
    SlotInfo& info = (*slots_)[slot];
    update_before_.push_back({slot, info.key, info.length, info.priority});
    update_after_.push_back(priorities[i] + 0.0);  // -0.0 -> 0.0
    positive_ += (update_after_.back() > 0) - (info.priority > 0);
    info.priority = update_after_.back();
    if (keeps_steps) {  // every step of it (the step trees read them)
      double* raw = &step_priority_[static_cast<size_t>(slot * spec_.max_length)];
      std::fill(raw, raw + info.length, info.priority);
    }
  }
  const int64_t updated = static_cast<int64_t>(update_before_.size());
  for (Selector* selector : selectors_.using_priority()) {
    selector->UpdatePriorities(update_before_.data(), update_after_.data(), updated);
  }
  counters_.priority_updates += updated;
  return updated;
}

int64_t Table::UpdateStepPriorities(const int64_t* keys, const int64_t* steps,
                                    const double* priorities, int64_t rows, int64_t width) {
  if (!spec_.step_priorities) {
    throw InvalidArgument("this table keeps one priority per trajectory: step priorities need "
                          "a table made with step_priorities=True");
  }
  for (int64_t e = 0; e < rows * width; ++e) {
    if (steps[e] < 0) continue;
    if (steps[e] >= spec_.max_length) {
      throw InvalidArgument("entry " + std::to_string(e) + " names step " +
                            std::to_string(steps[e]) + ", past max_length " +
                            std::to_string(spec_.max_length));
    }
    if (!ValidPriority(priorities[e])) CheckPriority(priorities[e], "entry " + std::to_string(e));
  }
  MutexLock lock(CheckedMutex());
  CheckOpenLocked();
  OwnPrioritiesLocked();
  std::vector<StepRow> named = NamedStepRowsLocked(keys, steps, rows, width);
  // Everything the update allocates is made before it writes anything: an
  // update too large for memory (std::bad_alloc) changes nothing.
  std::vector<int64_t> leaves;
  leaves.reserve(named.size() * static_cast<size_t>(width));
  std::vector<size_t> order(named.size());
  // SettleLargestStepsLocked tells the selectors of each trajectory once.
  ReserveUpdateLocked(std::min(static_cast<int64_t>(named.size()), spec_.capacity),
                      static_cast<int64_t>(named.size()) * width);
  // Rows naming no live key are skipped; those with a negative key are not
  // counted (as UpdatePriorities counts them).
  skipped_updates_ += std::count_if(keys, keys + rows, [](int64_t k) { return k >= 0; }) -
                      static_cast<int64_t>(named.size());
  for (StepRow& row : named) {
    const int64_t b = row.row;
    for (int64_t j = 0; j < width; ++j) {
      if (steps[b * width + j] < 0) continue;
      leaves.push_back(row.slot * spec_.max_length + steps[b * width + j]);
      step_priority_[static_cast<size_t>(leaves.back())] = priorities[b * width + j] + 0.0;
    }
    row.leaves_end = static_cast<int64_t>(leaves.size());
  }
  for (StepPrioritizedSelector* selector :
       selectors_.Of<StepPrioritizedSelector>(Strategy::kPrioritizedSteps)) {
    selector->SetSteps(leaves.data(), static_cast<int64_t>(leaves.size()));
  }
  SettleLargestStepsLocked(named, leaves, order);
  counters_.priority_updates += static_cast<int64_t>(named.size());
  return static_cast<int64_t>(named.size());
}

void Table::ReserveUpdateLocked(int64_t items, int64_t steps) {
  update_before_.clear();
  update_after_.clear();
  update_before_.reserve(static_cast<size_t>(items));
  update_after_.reserve(static_cast<size_t>(items));
  for (Selector* selector : selectors_.using_priority()) selector->ReserveUpdates(items);
  for (StepPrioritizedSelector* selector :
       selectors_.Of<StepPrioritizedSelector>(Strategy::kPrioritizedSteps)) {
    selector->ReserveSteps(steps);
  }
}

std::vector<Table::StepRow> Table::NamedStepRowsLocked(const int64_t* keys, const int64_t* steps,
                                                       int64_t rows, int64_t width) const {
  std::vector<StepRow> named;
  named.reserve(static_cast<size_t>(rows));
  // The step priorities a row names lie in another trajectory's run of the
  // array than the row before's (a cache miss or three): prefetched kAhead
  // rows ahead, so the misses of several rows overlap instead of following
  // each other. A row's steps are usually consecutive, so its steps a line
  // apart and its last cover its lines.
  constexpr int64_t kAhead = 8;
  constexpr int64_t kStepsALine = 64 / sizeof(double);
  // Read here, under mu_: the lambda is a function of its own to the lock check.
  const Slots& slots = *slots_;
  const double* all_steps = step_priority_.data();
  const auto prefetch_row = [&](int64_t b) {
    if (keys[b] < 0 || width <= 0) return;
    const int64_t slot = slots.layout().Slot(keys[b]);
    if (slot >= slots.capacity()) return;
    const double* raw = all_steps + slot * spec_.max_length;
    // Steps past max_length were refused before the lock; below 0, padding.
    for (int64_t j = 0; j < width; j += kStepsALine) {
      if (steps[b * width + j] >= 0) PrefetchForRead(raw + steps[b * width + j]);
    }
    if (steps[b * width + width - 1] >= 0) PrefetchForRead(raw + steps[b * width + width - 1]);
  };
  for (int64_t b = 0; b < std::min(rows, kAhead); ++b) prefetch_row(b);
  for (int64_t b = 0; b < rows; ++b) {
    if (b + kAhead < rows) prefetch_row(b + kAhead);
    const int64_t slot = slots_->Find(keys[b]);
    if (slot < 0) continue;
    const SlotInfo& info = (*slots_)[slot];
    const double* raw = &step_priority_[static_cast<size_t>(slot * spec_.max_length)];
    StepRow row{b, slot, false, 0};
    for (int64_t j = 0; j < width; ++j) {
      const int64_t step = steps[b * width + j];
      if (step >= info.length) {
        throw InvalidArgument("row " + std::to_string(b) + " names step " +
                              std::to_string(step) + " of key " + std::to_string(keys[b]) +
                              ", which has " + std::to_string(info.length) + " steps");
      }
      if (step >= 0) row.held_largest |= raw[step] == info.priority;
    }
    named.push_back(row);
  }
  return named;
}

void Table::SettleLargestStepsLocked(std::vector<StepRow>& named,
                                     const std::vector<int64_t>& leaves,
                                     std::vector<size_t>& order) {
  // Each row's largest value as its steps end (a later entry for a step
  // wins), then each trajectory's own priority. Every step not named is at
  // most the old one, so a written value at least as large is the new one;
  // the steps are read again only where a named step held the old largest
  // and every written value fell below it (a prioritized sample draws
  // windows where the largest steps are, so they often hold it).
  int64_t first = 0;
  for (StepRow& row : named) {
    double largest = 0.0;
    for (int64_t i = first; i < row.leaves_end; ++i) {
      largest = std::max(largest, step_priority_[static_cast<size_t>(leaves[i])]);
    }
    first = row.leaves_end;
    row.largest_written = largest;
  }
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t x, size_t y) { return named[x].slot < named[y].slot; });
  update_before_.clear();
  update_after_.clear();
  for (size_t k = 0; k < order.size();) {
    const int64_t slot = named[order[k]].slot;
    bool held_largest = false;
    double written = 0.0;
    for (; k < order.size() && named[order[k]].slot == slot; ++k) {
      held_largest |= named[order[k]].held_largest;
      written = std::max(written, named[order[k]].largest_written);
    }
    SlotInfo& info = (*slots_)[slot];
    const double largest = held_largest && written < info.priority
                               ? LargestStepPriorityLocked(slot)
                               : std::max(info.priority, written);
    if (largest == info.priority) continue;
    update_before_.push_back({slot, info.key, info.length, info.priority});
    update_after_.push_back(largest);
    positive_ += (largest > 0) - (info.priority > 0);
    info.priority = largest;
  }
  for (Selector* selector : selectors_.using_priority()) {
    if (selectors_.Holds(Strategy::kPrioritizedSteps, selector)) continue;  // set step by step
    selector->UpdatePriorities(update_before_.data(), update_after_.data(),
                               static_cast<int64_t>(update_before_.size()));
  }
}

double Table::LargestStepPriorityLocked(int64_t slot) const {
  const double* raw = &step_priority_[static_cast<size_t>(slot * spec_.max_length)];
  const int64_t length = (*slots_)[slot].length;
  // Four running maxima: one would wait for the last at every step.
  double m[4] = {0.0, 0.0, 0.0, 0.0};
  int64_t t = 0;
  for (; t + 4 <= length; t += 4) {
    for (int k = 0; k < 4; ++k) m[k] = raw[t + k] > m[k] ? raw[t + k] : m[k];
  }
  for (; t < length; ++t) m[0] = raw[t] > m[0] ? raw[t] : m[0];
  return std::max(std::max(m[0], m[1]), std::max(m[2], m[3]));
}

}  // namespace gearjax
