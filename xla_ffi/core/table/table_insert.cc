// Table's inserts (see table.h): slots reserved, filled and published,
// evictions, restores of saved slots.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <utility>

#include "core/limits.h"
#include "core/prefetch.h"
#include "core/random.h"
#include "core/table/table.h"
#include "core/table/table_internal.h"

namespace gearjax {

using table_internal::Number;

int64_t Table::AcquireSlotLocked(MutexLock& lock, bool* evicted) {
  *evicted = false;
  for (;;) {
    const int64_t free = slots_->AcquireFree();
    if (free >= 0) return free;
    const int64_t victim = ChooseVictim(spec_.remover, *order_, min_heap_);
    if (victim >= 0) {
      if (OwnPrioritiesLocked()) continue;  // waited: look again
      EvictLocked(victim);
      *evicted = true;
      return victim;
    }
    // Every slot is being written by another inserter; copies are finite, so
    // one is published (or abandoned) soon.
    changed_.wait(lock.native());
    CheckOpenLocked();
  }
}

void Table::RemoveFromSelectorsLocked(int64_t slot) {
  const Item item = ItemLocked(slot);
  for (Selector* selector : selectors_.all()) selector->Delete(item);
  --live_;
  if (item.priority > 0) --positive_;
  num_steps_ -= item.length;
  ++counters_.evictions;
}

void Table::EvictLocked(int64_t slot) {
  RemoveFromSelectorsLocked(slot);
  (*slots_)[slot].state = SlotState::kWriting;  // key and length stay until republished
}

void Table::CountDrawLocked(int64_t slot, uint64_t ticket) {
  if (spec_.max_times_sampled == 0) return;
  if (++times_sampled_[slot] < spec_.max_times_sampled) return;
  RemoveFromSelectorsLocked(slot);
  (*slots_)[slot].state = SlotState::kFree;  // key and length stay until republished
  slots_->ReleaseFree(slot);
  freed_at_[slot] = ticket;
}

void Table::PublishLocked(int64_t slot, int64_t key, int64_t length, double priority,
                          const double* steps, int64_t stamp) {
  // While a GPU update may run, the Prioritized trees are its: the leaves
  // wait among the ledger's deferred leaves and the insert does not wait for the GPU.
  const bool defer = selectors_.Has(Strategy::kPrioritized) && !SettledPrioritiesLocked();
  stamps_[slot] = stamp;
  last_stamp_ = stamp;
  times_sampled_[slot] = 0;
  if (!step_priority_.empty()) {  // read by the step trees' Insert below
    double* raw = &step_priority_[static_cast<size_t>(slot * spec_.max_length)];
    for (int64_t t = 0; t < length; ++t) raw[t] = steps != nullptr ? steps[t] + 0.0 : priority;
  }
  SlotInfo& info = (*slots_)[slot];
  info.key = key;
  info.length = length;
  info.priority = priority;
  // Last, with release: a kernel that reads the state live reads this key
  // (GpuUpdateLiveKey), never the evicted item's.
  __atomic_store_n(reinterpret_cast<uint8_t*>(&info.state), static_cast<uint8_t>(SlotState::kLive),
                   __ATOMIC_RELEASE);
  const Item item{slot, key, length, priority};
  for (Selector* selector : selectors_.all()) {
    if (defer && selectors_.Holds(Strategy::kPrioritized, selector)) continue;
    selector->Insert(item);
  }
  if (defer) gpu_updates_.Defer(slot);
  ++live_;
  if (priority > 0) ++positive_;
  num_steps_ += length;
}

int64_t Table::Insert(const std::vector<const void*>& sources, int64_t length, double priority,
                      int64_t restore_key, int64_t restore_slot, int64_t restore_stamp,
                      const double* steps) {
  if (sources.size() != spec_.columns.size()) {
    throw InvalidArgument("expected " + std::to_string(spec_.columns.size()) + " columns, got " +
                          std::to_string(sources.size()));
  }
  return InsertWith(
      length, priority,
      [&](int64_t slot) {
        for (int c = 0; c < num_columns(); ++c) {
          arena_->Write(StepOffset(c, slot, 0), sources[c],
                        static_cast<size_t>(length * step_bytes(c)));
        }
      },
      restore_key, restore_slot, restore_stamp, steps);
}

int64_t Table::InsertWith(int64_t length, double priority, const Fill& fill,
                          int64_t restore_key, int64_t restore_slot, int64_t restore_stamp,
                          const double* steps) {
  if (length < 1 || length > spec_.max_length) {
    throw InvalidArgument("trajectory length " + std::to_string(length) + " is outside [1, " +
                          std::to_string(spec_.max_length) + "]");
  }
  if (steps != nullptr) {
    if (!spec_.step_priorities) {
      throw InvalidArgument("this table keeps one priority per trajectory: make it with "
                            "step_priorities=True to give one per step");
    }
    priority = 0.0;  // the trajectory's own: the largest of its steps'
    for (int64_t t = 0; t < length; ++t) {
      if (!ValidPriority(steps[t])) CheckPriority(steps[t], "step " + std::to_string(t));
      priority = std::max(priority, steps[t] + 0.0);
    }
  }
  CheckPriority(priority, "the priority");
  priority += 0.0;  // -0.0 -> 0.0
  const bool restoring = restore_key >= 0;
  MutexLock lock(CheckedMutex());
  CheckOpenLocked();
  if (restoring) {
    if (restore_slot < 0 || restore_slot >= spec_.capacity ||
        (*slots_)[restore_slot].state != SlotState::kFree) {
      throw InvalidArgument("restored slot " + std::to_string(restore_slot) + " is not free");
    }
    if (key_layout_.Slot(restore_key) != restore_slot ||
        key_layout_.Sequence(restore_key) < counters_.next_sequence) {
      throw InvalidArgument("restored key " + std::to_string(restore_key) +
                            " does not name slot " + std::to_string(restore_slot) +
                            " or is not above the keys so far");
    }
    if (restore_stamp >= 0 && (restore_stamp <= last_stamp_ || restore_stamp >= kMaxStamp)) {
      throw InvalidArgument("restored insertion stamp " + std::to_string(restore_stamp) +
                            " is not above the stamps so far, or not below 2^62");
    }
  }
  const int64_t slot = ReserveLocked(lock, restoring ? restore_slot : -1);
  lock.Unlock();
  try {
    fill(slot);
  } catch (...) {
    lock.Relock();
    AbandonLocked(slot, restoring);
    throw;
  }
  lock.Relock();
  if (closed_) {
    AbandonLocked(slot, restoring);
    throw Closed("the table was closed during the insert");
  }
  return PublishReservedLocked(slot, length, priority, restore_key, restore_stamp, steps);
}

int64_t Table::InsertManyWith(int64_t n, const int64_t* lengths, const double* priorities,
                              const FillMany& fill, int64_t* keys, int64_t* inserted) {
  *inserted = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (lengths[i] < 1 || lengths[i] > spec_.max_length) {
      throw InvalidArgument("trajectory " + std::to_string(i) + " has length " +
                            std::to_string(lengths[i]) + ", outside [1, " +
                            std::to_string(spec_.max_length) + "]");
    }
    CheckPriority(priorities[i], "the priority of trajectory " + std::to_string(i));
  }
  if (n > 0) CheckKeysLeft(n);  // every row's key, before the first goes in
  // Rows go in chunks of at most half the slots: a chunk reserves its slots
  // before filling any, and must never wait for a slot it holds itself.
  const int64_t chunk = std::max<int64_t>(1, spec_.capacity / 2);
  std::vector<int64_t> slots;
  for (int64_t first = 0; first < n; first += chunk) {
    const int64_t rows = std::min(chunk, n - first);
    slots.clear();
    std::exception_ptr failed;
    {
      MutexLock lock(CheckedMutex());
      for (int64_t i = 0; i < rows; ++i) {
        try {
          CheckOpenLocked();
          slots.push_back(ReserveLocked(lock, -1));
        } catch (...) {
          failed = std::current_exception();
          break;
        }
      }
    }
    // What was reserved is filled and published even when a later row could
    // not be reserved: the rows before the failure go in, in order.
    if (!slots.empty()) {
      try {
        fill(first, slots.data(), static_cast<int64_t>(slots.size()));
      } catch (...) {
        MutexLock lock(CheckedMutex());
        for (int64_t slot : slots) AbandonLocked(slot, false);
        throw;
      }
      MutexLock lock(CheckedMutex());
      if (closed_) {
        for (int64_t slot : slots) AbandonLocked(slot, false);
        throw Closed("the table was closed during the insert");
      }
      for (size_t j = 0; j < slots.size(); ++j) {
        const int64_t row = first + static_cast<int64_t>(j);
        keys[row] = PublishReservedLocked(slots[j], lengths[row], priorities[row] + 0.0, -1, -1);
        ++*inserted;
      }
    }
    if (failed) std::rethrow_exception(failed);
  }
  return *inserted;
}

void Table::CheckKeysLeft(int64_t n) const {
  MutexLock lock(CheckedMutex());
  CheckOpenLocked();
  CheckKeysLeftLocked(n);
}

void Table::CheckKeysLeftLocked(int64_t n) const {
  // Keys left less one (max_sequence may be INT64_MAX: one more would overflow).
  const int64_t keys_after_one = key_layout_.max_sequence() - counters_.next_sequence - writers_;
  const int64_t stamps_left = kMaxStamp - 1 - last_stamp_;
  if (keys_after_one >= n - 1 && stamps_left >= n) return;
  const std::string call =
      n == 1 ? std::string() : "; an insert of " + std::to_string(n) + " trajectories needs as many";
  if (keys_after_one < n - 1) {
    const int64_t keys_left = keys_after_one + 1;
    throw InvalidArgument(keys_left <= 0 ? "this table has issued every key it can (" +
                                               std::to_string(key_layout_.max_sequence()) +
                                               " + 1 inserts)" + call
                                         : "this table has " + std::to_string(keys_left) +
                                               " keys left to issue" + call);
  }
  throw InvalidArgument("this table has issued every insertion stamp it can (a restored stamp "
                        "reached 2^62 - 1)" + call);
}

void Table::WaitToInsertLocked(MutexLock& lock) {
  if (limiter_.CanInsert(LimiterStateLocked())) return;
  const auto admitted = [&] {
    mu_.AssertHeld();
    return limiter_.CanInsert(LimiterStateLocked());
  };
  if (!WaitWithinLimiterTimeoutLocked(lock, admitted, "an insert held back by the rate limiter")) {
    throw Timeout("insert timed out after " + Number(spec_.limiter.timeout_seconds) +
                  " s: the rate limiter holds inserts back until more is sampled (" +
                  limiter_.Describe(LimiterStateLocked()) + ")");
  }
}

void Table::WaitForSlotReadersLocked(MutexLock& lock, int64_t slot, bool evicted,
                                     bool restoring) {
  // Samples that drew this slot before it was evicted may still read it: they
  // hold tickets up to now; readers hold pins. A slot freed by
  // max_times_sampled waits for the sample that freed it and those before
  // (freed_at_ is 0, waiting for nothing, for a slot never freed that way).
  // Close wakes us.
  // The wait is bounded (TableSpec::slot_wait_seconds): a sample whose
  // stream never finishes must not hang inserts forever. A writer that gives
  // up leaves the slot free but still owed to those samples (freed_at_), so
  // the next writer waits for them too.
  const uint64_t quiet_after = evicted ? tickets_.last() : freed_at_[slot];
  const auto deadline = Clock::now() + std::chrono::duration<double>(spec_.slot_wait_seconds);
  const bool quiet = WaitForTickets(lock.native(), deadline, [&] {
    mu_.AssertHeld();
    return closed_ || ((*slots_)[slot].pins == 0 && tickets_.QuietSince(quiet_after));
  });
  if (closed_) {
    AbandonLocked(slot, restoring);
    throw Closed("the table was closed during the insert");
  }
  if (!quiet) {
    freed_at_[slot] = quiet_after;
    const bool pinned = (*slots_)[slot].pins > 0;
    AbandonLocked(slot, restoring);
    throw Timeout("insert timed out after " + Number(spec_.slot_wait_seconds) + " s: slot " +
                  std::to_string(slot) + " is still " +
                  (pinned ? "pinned by a reader" : "read by a sample that has not ended") +
                  " (a GPU stream that does not progress?)");
  }
}

int64_t Table::ReserveLocked(MutexLock& lock, int64_t restore_slot) {
  const bool restoring = restore_slot >= 0;
  // Checkpoint restores bypass the limiter: they recreate state, not traffic.
  if (!restoring) {
    CheckKeysLeftLocked();
    WaitToInsertLocked(lock);
  }
  ++writers_;
  int64_t slot = restore_slot;
  bool evicted = false;
  if (!restoring) {
    try {
      slot = AcquireSlotLocked(lock, &evicted);
    } catch (...) {
      --writers_;
      changed_.notify_all();
      throw;
    }
  }
  (*slots_)[slot].state = SlotState::kWriting;
  // Seen before any step the writer copies in after the lock is released:
  // one-sided readers of other processes (and of this one) take no lock,
  // and check the state after reading a window. The unlock alone would not
  // order later stores after it (AArch64 may show them first; x86 does not).
  std::atomic_thread_fence(std::memory_order_release);
  WaitForSlotReadersLocked(lock, slot, evicted, restoring);
  return slot;
}

void Table::AbandonLocked(int64_t slot, bool restoring) {
  --writers_;
  (*slots_)[slot].state = SlotState::kFree;
  if (!restoring) slots_->ReleaseFree(slot);  // a restored slot never left the free list
  changed_.notify_all();
}

int64_t Table::PublishReservedLocked(int64_t slot, int64_t length, double priority,
                                     int64_t restore_key, int64_t restore_stamp,
                                     const double* steps) {
  const bool restoring = restore_key >= 0;
  --writers_;
  const int64_t sequence = restoring ? key_layout_.Sequence(restore_key) : counters_.next_sequence;
  const int64_t key = restoring ? restore_key : key_layout_.Key(sequence, slot);
  counters_.next_sequence = sequence + 1;
  ++counters_.inserts;
  // Wall-clock time orders shards on different hosts; within the table the
  // stamp must still increase, whatever the clock does (steps back, ties).
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  const int64_t stamp = restoring && restore_stamp >= 0 ? restore_stamp
                                                         : std::max(now, last_stamp_ + 1);
  PublishLocked(slot, key, length, priority, steps, stamp);
  changed_.notify_all();
  return key;
}

}  // namespace gearjax
