// The trajectory table (see table.h for the invariants).
#include "table.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "limits.h"
#include "prefetch.h"
#include "random.h"

namespace gearjax {
namespace {

std::string Number(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.17g", v);
  return buffer;
}

bool IsSubnormal(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  return (bits & 0x7ff0000000000000ull) == 0 && (bits & 0x000fffffffffffffull) != 0;
}

// Counts a call as waiting (Table::waiting) for as long as it lives; made
// and destroyed with the table's mutex held.
class CountedWait {
 public:
  explicit CountedWait(int64_t& count) : count_(count) { ++count_; }
  ~CountedWait() { --count_; }
  CountedWait(const CountedWait&) = delete;
  CountedWait& operator=(const CountedWait&) = delete;

 private:
  int64_t& count_;
};

}  // namespace

bool ValidPriority(double priority) {
  return !IsSubnormal(priority) && priority >= 0.0 && priority <= kMaxPriority;
}

void CheckPriority(double priority, const std::string& what) {
  if (IsSubnormal(priority)) {
    throw InvalidArgument(what + " is " + Number(priority) +
                          ", a subnormal float64; priorities are 0 or in [2.2250738585072014e-308, "
                          "1.0000000150474662e+30]");
  }
  if (!(priority >= 0.0 && priority <= kMaxPriority)) {
    throw InvalidArgument(what + " is " + Number(priority) +
                          "; priorities must be finite, >= 0 and <= 1.0000000150474662e+30 (1e30 as a float32)");
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
  arena_ = std::make_unique<Arena>(layout_.arena_bytes(), spec_.gpu_mapped, spec_.on_device);
  for (int c = 0; c < num_columns(); ++c) {
    arena_->Write(layout_.pad_offset(c), spec_.columns[c].pad_step.data(),
                  static_cast<size_t>(step_bytes(c)));
  }
  slots_ = std::make_unique<Slots>(spec_.capacity, spec_.gpu_mapped, spec_.key_bits);
  stamps_.assign(static_cast<size_t>(spec_.capacity), -1);
  times_sampled_.assign(static_cast<size_t>(spec_.capacity), 0);
  freed_at_.assign(static_cast<size_t>(spec_.capacity), 0);
  order_ = std::make_unique<InsertionOrder>(spec_.capacity);
  uniform_ = std::make_unique<UniformSelector>(spec_.capacity, spec_.gpu_mapped);
  AttachLocked(order_.get());
  AttachLocked(uniform_.get());
  if (spec_.remover == Remover::kMinPriority) {
    min_heap_ = std::make_unique<MinPriorityHeap>(spec_.capacity);
    AttachLocked(min_heap_.get());
  }
}

Table::~Table() = default;

void Table::CheckDevice(int device) const {
  const int home = arena_->device_ordinal();
  if (!arena_->on_device() || device == home) return;
  throw InvalidArgument("this table lives in the memory of GPU " + std::to_string(home) +
                        " (placement 'device'), and this program runs on GPU " +
                        std::to_string(device) + "; give each GPU its own table, or use "
                        "placement 'host', which every GPU reads");
}

std::string Table::Describe(int64_t handle) const {
  const std::string id = "(handle " + std::to_string(handle) + ")";
  return spec_.name.empty() ? "table " + id : "table '" + spec_.name + "' " + id;
}

void Table::CheckOpenLocked() const {
  if (closed_) throw Closed("the table is closed");
}

bool Table::closed() const { return closed_.load(std::memory_order_acquire); }

bool Table::InsideLocked() const {
  DrainReturnedLocked();
  return slots_->pinned() > 0 || writers_ > 0 || !in_flight_.empty();
}

int64_t Table::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waiting_;
}

bool Table::Close(double wait_seconds) {
  std::vector<std::shared_ptr<void>> memory;
  {
    std::unique_lock<std::mutex> lock(mu_);
    closed_.store(true, std::memory_order_release);
    changed_.notify_all();
    if (released_) return true;
    const auto deadline = Clock::now() + std::chrono::duration<double>(
                                             std::clamp(wait_seconds, 0.0, kMaxTimeoutSeconds));
    if (!WaitForTickets(lock, deadline, [&] { return !InsideLocked(); })) return false;
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
  selectors_.clear();
  priority_selectors_.clear();
  take(topk_);
  take(lengths_);
  take(recent_);
  for (auto& tree : prioritized_) take(tree);
  prioritized_.clear();
  take(timestep_);
  take(min_heap_);
  take(uniform_);
  take(order_);
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

void Table::AttachLocked(Selector* selector) {
  selectors_.push_back(selector);
  if (selector->UsesPriority()) priority_selectors_.push_back(selector);
}

Item Table::ItemLocked(int64_t slot) const {
  const SlotInfo& info = (*slots_)[slot];
  return {slot, info.key, info.length, info.priority};
}

// Each lazily created selector is filled with the live items, oldest first,
// before it is installed (a throw leaves the table as it was), then kept up
// to date like the others.
template <typename S>
std::unique_ptr<S> Table::FilledLocked(std::unique_ptr<S> selector) const {
  for (int64_t s = order_->Oldest(); s >= 0; s = order_->Next(s)) selector->Insert(ItemLocked(s));
  return selector;
}

TimestepSelector& Table::TimestepLocked() {
  if (!timestep_) {
    timestep_ = FilledLocked(std::make_unique<TimestepSelector>(spec_.capacity, spec_.gpu_mapped));
    AttachLocked(timestep_.get());
  }
  return *timestep_;
}

PrioritizedSelector& Table::PrioritizedLocked(double alpha) {
  for (auto& selector : prioritized_) {
    if (selector->alpha() == alpha) return *selector;
  }
  if (prioritized_.size() >= static_cast<size_t>(kMaxPriorityTrees)) {
    std::string alphas;
    for (auto& selector : prioritized_) alphas += (alphas.empty() ? "" : ", ") + Number(selector->alpha());
    throw InvalidArgument("a table keeps sum trees for at most " +
                          std::to_string(kMaxPriorityTrees) + " Prioritized alphas (this one has " +
                          alphas + "); Prioritized(" + Number(alpha) + ") would be one more");
  }
  prioritized_.push_back(
      FilledLocked(std::make_unique<PrioritizedSelector>(alpha, spec_.capacity, spec_.gpu_mapped)));
  AttachLocked(prioritized_.back().get());
  return *prioritized_.back();
}

RecentSelector& Table::RecentLocked() {
  if (!recent_) {
    recent_ = FilledLocked(std::make_unique<RecentSelector>());
    AttachLocked(recent_.get());
  }
  return *recent_;
}

LengthIndex& Table::LengthIndexLocked() {
  if (!lengths_) {
    lengths_ = FilledLocked(std::make_unique<LengthIndex>(spec_.max_length));
    AttachLocked(lengths_.get());
  }
  return *lengths_;
}

TopKSelector& Table::TopKLocked() {
  if (!topk_) {
    topk_ = FilledLocked(std::make_unique<TopKSelector>());
    AttachLocked(topk_.get());
  }
  return *topk_;
}

int64_t Table::AcquireSlotLocked(std::unique_lock<std::mutex>& lock, bool* evicted) {
  *evicted = false;
  for (;;) {
    const int64_t free = slots_->AcquireFree();
    if (free >= 0) return free;
    const int64_t victim = ChooseVictim(spec_.remover, *order_, min_heap_.get());
    if (victim >= 0) {
      EvictLocked(victim);
      *evicted = true;
      return victim;
    }
    // Every slot is being written by another inserter; copies are finite, so
    // one is published (or abandoned) soon.
    changed_.wait(lock);
    CheckOpenLocked();
  }
}

void Table::RemoveFromSelectorsLocked(int64_t slot) {
  const Item item = ItemLocked(slot);
  for (Selector* selector : selectors_) selector->Delete(item);
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
                          int64_t stamp) {
  stamps_[slot] = stamp;
  last_stamp_ = stamp;
  times_sampled_[slot] = 0;
  SlotInfo& info = (*slots_)[slot];
  info.key = key;
  info.length = length;
  info.priority = priority;
  info.state = SlotState::kLive;
  const Item item{slot, key, length, priority};
  for (Selector* selector : selectors_) selector->Insert(item);
  ++live_;
  if (priority > 0) ++positive_;
  num_steps_ += length;
}

int64_t Table::Insert(const std::vector<const void*>& sources, int64_t length, double priority,
                      int64_t restore_key, int64_t restore_slot, int64_t restore_stamp) {
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
      restore_key, restore_slot, restore_stamp);
}

int64_t Table::InsertWith(int64_t length, double priority, const Fill& fill,
                          int64_t restore_key, int64_t restore_slot, int64_t restore_stamp) {
  if (length < 1 || length > spec_.max_length) {
    throw InvalidArgument("trajectory length " + std::to_string(length) + " is outside [1, " +
                          std::to_string(spec_.max_length) + "]");
  }
  CheckPriority(priority, "the priority");
  priority += 0.0;  // -0.0 -> 0.0
  const bool restoring = restore_key >= 0;
  std::unique_lock<std::mutex> lock(mu_);
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
  lock.unlock();
  try {
    fill(slot);
  } catch (...) {
    lock.lock();
    AbandonLocked(slot, restoring);
    throw;
  }
  lock.lock();
  if (closed_) {
    AbandonLocked(slot, restoring);
    throw Closed("the table was closed during the insert");
  }
  return PublishReservedLocked(slot, length, priority, restore_key, restore_stamp);
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
  // Rows go in chunks of at most half the slots: a chunk reserves its slots
  // before filling any, and must never wait for a slot it holds itself.
  const int64_t chunk = std::max<int64_t>(1, spec_.capacity / 2);
  std::vector<int64_t> slots;
  for (int64_t first = 0; first < n; first += chunk) {
    const int64_t rows = std::min(chunk, n - first);
    slots.clear();
    std::exception_ptr failed;
    {
      std::unique_lock<std::mutex> lock(mu_);
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
        std::lock_guard<std::mutex> lock(mu_);
        for (int64_t slot : slots) AbandonLocked(slot, false);
        throw;
      }
      std::lock_guard<std::mutex> lock(mu_);
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

int64_t Table::ReserveLocked(std::unique_lock<std::mutex>& lock, int64_t restore_slot) {
  const bool restoring = restore_slot >= 0;
  if (!restoring && counters_.next_sequence + writers_ > key_layout_.max_sequence()) {
    throw InvalidArgument("this table has issued every key it can (" +
                          std::to_string(key_layout_.max_sequence()) + " + 1 inserts)");
  }
  if (!restoring && last_stamp_ >= kMaxStamp - 1) {
    throw InvalidArgument("this table has issued every insertion stamp it can (a restored "
                          "stamp reached 2^62 - 1)");
  }
  // Checkpoint restores bypass the limiter: they recreate state, not traffic.
  if (!restoring && !limiter_.CanInsert(LimiterStateLocked())) {
    const double timeout = spec_.limiter.timeout_seconds;
    const CountedWait counted(waiting_);
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout);
    if (!changed_.wait_until(lock, deadline, [&] {
          return closed_ || limiter_.CanInsert(LimiterStateLocked());
        })) {
      throw Timeout("insert timed out after " + Number(timeout) +
                    " s: the rate limiter holds inserts back until more is sampled (" +
                    limiter_.Describe(LimiterStateLocked()) + ")");
    }
    CheckOpenLocked();
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
  // Samples that drew this slot before it was evicted may still read it: they
  // hold tickets up to now; readers hold pins. A slot freed by
  // max_times_sampled waits for the sample that freed it and those before
  // (freed_at_ is 0, waiting for nothing, for a slot never freed that way).
  // Close wakes us.
  // The wait is bounded (TableSpec::slot_wait_seconds): a sample whose
  // stream never finishes must not hang inserts forever. A writer that gives
  // up leaves the slot free but still owed to those samples (freed_at_), so
  // the next writer waits for them too.
  const uint64_t quiet_after = evicted ? tickets_ : freed_at_[slot];
  const auto deadline = Clock::now() + std::chrono::duration<double>(spec_.slot_wait_seconds);
  const bool quiet = WaitForTickets(lock, deadline, [&] {
    return closed_ || ((*slots_)[slot].pins == 0 && QuietSince(quiet_after));
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
  return slot;
}

void Table::AbandonLocked(int64_t slot, bool restoring) {
  --writers_;
  (*slots_)[slot].state = SlotState::kFree;
  if (!restoring) slots_->ReleaseFree(slot);  // a restored slot never left the free list
  changed_.notify_all();
}

int64_t Table::PublishReservedLocked(int64_t slot, int64_t length, double priority,
                                     int64_t restore_key, int64_t restore_stamp) {
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
  PublishLocked(slot, key, length, priority, stamp);
  changed_.notify_all();
  return key;
}

void Table::CheckRequest(const SampleRequest& r) const {
  if (r.batch < 1 || r.batch > kMaxBatch) {
    throw InvalidArgument("batch_size must be in [1, 2**31 - 1], got " + std::to_string(r.batch));
  }
  if (r.window < 0 || r.window > spec_.max_length) {
    throw InvalidArgument("window must be in [1, max_length=" + std::to_string(spec_.max_length) +
                          "] (or whole trajectories)");
  }
  if (static_cast<int32_t>(r.cut) < 0 || static_cast<int32_t>(r.cut) >= kNumCuts) {
    throw InvalidArgument("unknown window cut " + std::to_string(static_cast<int32_t>(r.cut)));
  }
  switch (r.strategy) {
    case Strategy::kUniform:
    case Strategy::kTimestep:
      return;
    case Strategy::kPrioritized:
      if (!(r.alpha >= 0 && r.alpha <= kMaxAlpha)) {
        throw InvalidArgument("Prioritized alpha must be in [0, 8], got " + Number(r.alpha));
      }
      return;
    case Strategy::kTopK:
    case Strategy::kRecent:
      if (r.count < 1) throw InvalidArgument("TopK and Recent need a count >= 1");
      return;
  }
  throw InvalidArgument("unknown sampling strategy");
}

void Table::WaitToSampleLocked(std::unique_lock<std::mutex>& lock, const SampleRequest& r) {
  CheckOpenLocked();
  if (!limiter_.CanSample(LimiterStateLocked(), r.batch)) {
    const double timeout = spec_.limiter.timeout_seconds;
    const CountedWait counted(waiting_);
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout);
    if (!changed_.wait_until(lock, deadline, [&] {
          return closed_ || limiter_.CanSample(LimiterStateLocked(), r.batch);
        })) {
      if (live_ == 0 && timeout == 0) {
        // Both a table without a rate limiter and one whose limiter has
        // timeout 0 land here: the message fits both.
        throw Timeout("cannot sample: the table is empty, and sampling does not wait for inserts "
                      "here (the table has no rate limiter, or its limiter's timeout is 0): "
                      "insert trajectories first, or give the table a rate limiter with a "
                      "timeout > 0, e.g. MinSize(1, timeout=60), to wait for them");
      }
      throw Timeout("cannot sample " + std::to_string(r.batch) + " items: the rate limiter held "
                    "sampling back for " + Number(timeout) + " s (" +
                    limiter_.Describe(LimiterStateLocked()) + ")");
    }
    CheckOpenLocked();
  }
  // Checked before PrioritizedLocked may create a tree, so a refused sample
  // takes no alpha's place.
  if (r.strategy == Strategy::kPrioritized && r.alpha > 0 && positive_ == 0) {
    throw InvalidArgument("cannot sample with Prioritized: every stored trajectory has priority 0");
  }
}

void Table::SelectLocked(const SampleRequest& r, const uint32_t seed[2], const double* u,
                         Selection* out) {
  const int64_t n = r.batch;
  switch (r.strategy) {
    case Strategy::kUniform:
      uniform_->SelectMany(seed, u, n, out);
      return;
    case Strategy::kTimestep:
      TimestepLocked().SelectMany(u, n, out);
      return;
    case Strategy::kPrioritized:
      PrioritizedLocked(r.alpha).SelectMany(u, n, out);
      return;
    case Strategy::kTopK: {
      const TopKSelector& topk = TopKLocked();
      for (int64_t b = 0; b < n; ++b) out[b] = topk.Select(u[b], r.count);
      return;
    }
    case Strategy::kRecent: {
      const RecentSelector& recent = RecentLocked();
      for (int64_t b = 0; b < n; ++b) out[b] = recent.Select(u[b], r.count);
      return;
    }
  }
}

uint64_t Table::TakeTicketLocked() {
  DrainReturnedLocked();  // every sample drains, so in_flight_ stays as short as it is
  in_flight_.push_back(++tickets_);  // the largest yet: the vector stays sorted
  return tickets_;
}

uint64_t Table::Select(const SampleRequest& r, const uint32_t seed[2], Draw* draws) {
  CheckRequest(r);
  const int64_t n = r.batch;
  // The random words depend on the seed alone: expand them outside the lock,
  // into buffers this thread reuses (no allocation per call).
  thread_local std::vector<Words4> words;
  thread_local std::vector<double> u;
  thread_local std::vector<Selection> selections;
  words.resize(static_cast<size_t>(n));
  u.resize(static_cast<size_t>(n));
  selections.resize(static_cast<size_t>(n));
  for (int64_t b = 0; b < n; ++b) {
    words[b] = RowWords(seed, b);
    u[b] = UniformFromBits(words[b].w[0], words[b].w[1]);
  }
  std::unique_lock<std::mutex> lock(mu_);
  WaitToSampleLocked(lock, r);
  const bool constrained = Constrained(r);
  const bool fast_full = r.cut == Cut::kFull && r.window > 0 && r.replace &&
                         spec_.max_times_sampled == 0 &&
                         (r.strategy == Strategy::kUniform || r.strategy == Strategy::kTimestep) &&
                         SelectFullLocked(r, seed, u.data(), selections.data());
  if (constrained && !fast_full) {
    int64_t servable = CandidatesLocked(r);
    if (servable < n) {
      const double timeout = spec_.limiter.timeout_seconds;
      if (timeout == 0) throw InvalidArgument(ShortfallLocked(r, servable));
      const CountedWait counted(waiting_);
      const auto deadline = Clock::now() + std::chrono::duration<double>(timeout);
      if (!changed_.wait_until(lock, deadline, [&] {
            if (closed_) return true;
            if (!limiter_.CanSample(LimiterStateLocked(), n)) return false;
            servable = CandidatesLocked(r);
            return servable >= n;
          })) {
        char waited[32];
        std::snprintf(waited, sizeof(waited), "%g", timeout);
        throw Timeout(ShortfallLocked(r, servable) + " (waited " + waited + " s)");
      }
      CheckOpenLocked();
    }
    constrained_.Draw(candidates_, u.data(), n, selections.data());
  } else if (!fast_full) {
    SelectLocked(r, seed, u.data(), selections.data());
  }
  const uint64_t ticket = tickets_ + 1;  // TakeTicketLocked's, below
  // Slot records prefetched ahead of the one read: far enough for a miss to
  // memory (and its TLB miss) to finish, as each record takes little work.
  constexpr int64_t kAhead = 32;
  for (int64_t b = 0; b < std::min(n, kAhead); ++b) {
    if (selections[b].slot >= 0) PrefetchForRead(&(*slots_)[selections[b].slot]);
  }
  for (int64_t b = 0; b < n; ++b) {
    if (b + kAhead < n && selections[b + kAhead].slot >= 0) {
      PrefetchForRead(&(*slots_)[selections[b + kAhead].slot]);
    }
    if (selections[b].slot < 0) {
      throw std::logic_error("gearjax: the selection structures are inconsistent (a bug)");
    }
    const int64_t slot = selections[b].slot;
    const SlotInfo& info = (*slots_)[slot];
    Draw& d = draws[b];
    d.slot = slot;
    d.key = info.key;
    d.length = info.length;
    const WindowCut cut = CutWindow(r.cut, d.length, r.window, words[b].w[2], words[b].w[3]);
    d.start = cut.start;
    d.valid = cut.valid;
    d.table_size = live_;
    d.probability = static_cast<float>(selections[b].probability);
  }
  // After every row has its table size: the draws that use up an item's
  // max_times_sampled remove it now (its data stays readable until the
  // sample ends: see freed_at_).
  if (constrained) {
    for (int64_t b = 0; b < n; ++b) CountDrawLocked(selections[b].slot, ticket);
  }
  counters_.samples += static_cast<double>(n);
  changed_.notify_all();  // inserters and other samplers may be waiting
  return TakeTicketLocked();
}

bool Table::SelectFullLocked(const SampleRequest& r, const uint32_t seed[2], const double* u,
                             Selection* out) {
  // Rejection pays while at least 1 draw in 16 fits; below, listing is cheaper.
  constexpr double kMinAcceptance = 1.0 / 16;
  // Tries per row before giving the sample to the listing path: at the
  // lowest acceptance a row misses them all with probability (15/16)^256,
  // below 1e-7.
  constexpr uint32_t kTries = 256;
  // A try's Timestep acceptance word: an attempt counter no other draw of
  // the row uses (random.h); later tries take RedrawRow's words.
  constexpr uint32_t kAcceptAttempt = kUniformAttempts + 1;
  const int64_t w = r.window, n = r.batch;
  const bool timestep = r.strategy == Strategy::kTimestep;
  LengthIndex& index = LengthIndexLocked();
  const int64_t eligible = index.CountAtLeast(w);
  if (eligible == 0) return false;
  const double total = static_cast<double>(timestep ? index.FullWindows(w) : eligible);
  const double acceptance = total / static_cast<double>(timestep ? num_steps_ : live_);
  if (acceptance < kMinAcceptance) return false;
  const UniformView view = uniform_->view();
  const SumTree* tree = timestep ? &TimestepLocked().tree() : nullptr;
  for (int64_t b = 0; b < n; ++b) {
    bool found = false;
    for (uint32_t t = 0; t < kTries && !found; ++t) {
      const int64_t row = RedrawRow(b, t);
      double draw_u = u[b];
      if (t > 0) {
        const Words4 words = RowWords(seed, row);
        draw_u = UniformFromBits(words.w[0], words.w[1]);
      }
      const int64_t slot = timestep ? tree->Draw(draw_u) : UniformDraw(view, seed, row, draw_u);
      if (slot < 0) return false;  // an empty selector: cannot happen with eligible items
      const int64_t length = (*slots_)[slot].length;
      if (length < w) continue;
      if (timestep) {
        // Drawn in proportion to L; kept with probability (L - w + 1) / L.
        const Words4 accept = AttemptWords(seed, row, kAcceptAttempt);
        if (UniformFromBits(accept.w[0], accept.w[1]) * static_cast<double>(length) >=
            static_cast<double>(length - w + 1)) {
          continue;
        }
      }
      out[b] = {slot, (timestep ? static_cast<double>(length - w + 1) : 1.0) / total};
      found = true;
    }
    if (!found) return false;
  }
  return true;
}

int64_t Table::CandidatesLocked(const SampleRequest& r) {
  candidates_.clear();
  const int64_t limit = spec_.max_times_sampled;
  auto budget = [&](int64_t slot) {
    const int64_t left = limit > 0 ? limit - times_sampled_[slot] : r.batch;
    return r.replace ? left : std::min<int64_t>(left, 1);
  };
  auto eligible = [&](const SlotInfo& info) {
    return r.cut != Cut::kFull || info.length >= r.window;
  };
  // Candidates in slot order: a sequential scan of the slot records, and, like
  // every draw, dependent on which slots hold what rather than on history.
  const int64_t capacity = spec_.capacity;
  switch (r.strategy) {
    case Strategy::kUniform:
    case Strategy::kTimestep:
      for (int64_t s = 0; s < capacity; ++s) {
        const SlotInfo& info = (*slots_)[s];
        if (info.state != SlotState::kLive || !eligible(info)) continue;
        const int64_t weight = r.strategy == Strategy::kUniform ? 1
                               : r.cut == Cut::kFull && r.window > 0
                                   ? info.length - r.window + 1
                                   : info.length;
        candidates_.push_back({s, static_cast<double>(weight), budget(s)});
      }
      break;
    case Strategy::kPrioritized: {
      // The weights priority ** alpha as the strategy's sum tree holds them.
      const SumTree& tree = PrioritizedLocked(r.alpha).tree();
      for (int64_t s = 0; s < capacity; ++s) {
        const SlotInfo& info = (*slots_)[s];
        if (info.state != SlotState::kLive || !eligible(info)) continue;
        const double weight = tree.Get(s);
        if (weight > 0) candidates_.push_back({s, weight, budget(s)});
      }
      break;
    }
    case Strategy::kRecent:
      for (int64_t s = order_->Newest(); s >= 0 && static_cast<int64_t>(candidates_.size()) <
                                                        r.count;
           s = order_->Previous(s)) {
        if (eligible((*slots_)[s])) candidates_.push_back({s, 1.0, budget(s)});
      }
      break;
    case Strategy::kTopK: {
      for (int64_t s = 0; s < capacity; ++s) {
        const SlotInfo& info = (*slots_)[s];
        if (info.state == SlotState::kLive && eligible(info)) {
          candidates_.push_back({s, 1.0, budget(s)});
        }
      }
      // The best `count` by priority, newer (larger key) first among ties.
      const auto better = [&](const Candidate& a, const Candidate& b) {
        const SlotInfo& x = (*slots_)[a.slot];
        const SlotInfo& y = (*slots_)[b.slot];
        return x.priority != y.priority ? x.priority > y.priority : x.key > y.key;
      };
      const size_t k = static_cast<size_t>(
          std::min<int64_t>(r.count, static_cast<int64_t>(candidates_.size())));
      std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<ptrdiff_t>(k),
                        candidates_.end(), better);
      candidates_.resize(k);
      break;
    }
  }
  // TopK and Recent rank every eligible item but draw only from the best
  // `count`: an item left out has weight 0 (it is simply not listed).
  return TotalBudget(candidates_, r.batch);
}

std::string Table::ShortfallLocked(const SampleRequest& r, int64_t servable) const {
  std::string what = "cannot sample " + std::to_string(r.batch) + " rows";
  std::string why;
  if (r.cut == Cut::kFull) {
    why += "trajectories of at least window=" + std::to_string(r.window) + " steps (cut='full')";
  } else {
    why += "trajectories";
  }
  if (r.strategy == Strategy::kTopK || r.strategy == Strategy::kRecent) {
    why += std::string(" among the ") + (r.strategy == Strategy::kTopK ? "TopK" : "Recent") +
           " " + std::to_string(r.count);
  }
  if (r.strategy == Strategy::kPrioritized && r.alpha > 0) why += " with priority > 0";
  std::string limits;
  if (!r.replace) limits += "replace=False draws each at most once";
  if (spec_.max_times_sampled > 0) {
    limits += std::string(limits.empty() ? "" : "; ") + "max_times_sampled=" +
              std::to_string(spec_.max_times_sampled) + " limits each trajectory's draws";
  }
  return what + ": the table holds " + std::to_string(live_) + " trajectories, and the " + why +
         " among them can serve only " + std::to_string(servable) + " draws" +
         (limits.empty() ? "" : " (" + limits + ")");
}

uint64_t Table::BeginGpuSample(const SampleRequest& r, GpuSelection* selection) {
  CheckRequest(r);
  if (SelectsOnHost(r)) {
    throw InvalidArgument("TopK, Recent and constrained samples are not selected on the GPU");
  }
  std::unique_lock<std::mutex> lock(mu_);
  CheckOpenLocked();
  if (slots_->device_info() == nullptr) {
    throw InvalidArgument("this table's selection state is not GPU-mapped");
  }
  WaitToSampleLocked(lock, r);
  GpuSelection s{};
  s.info = slots_->device_info();
  s.table_size = live_;
  s.cut = r.cut;
  switch (r.strategy) {
    case Strategy::kUniform:
      s.uniform = true;
      s.live = uniform_->device_view();
      if (s.live.live == nullptr || s.live.ones.nodes == nullptr) {
        throw InvalidArgument("the live-slot bitmap is not GPU-mapped");
      }
      break;
    case Strategy::kTimestep:
      s.tree = TimestepLocked().tree().device_view();
      break;
    default:  // Prioritized
      s.tree = PrioritizedLocked(r.alpha).tree().device_view();
      break;
  }
  if (!s.uniform && s.tree.nodes == nullptr) throw InvalidArgument("the sum tree is not GPU-mapped");
  *selection = s;
  counters_.samples += static_cast<double>(r.batch);
  changed_.notify_all();  // inserters may be waiting on the limiter
  return TakeTicketLocked();
}

StrategyTotals Table::Totals(const SampleRequest& r) {
  CheckRequest(r);
  std::lock_guard<std::mutex> lock(mu_);
  CheckOpenLocked();
  StrategyTotals totals{live_, num_steps_, 0.0};
  switch (r.strategy) {
    case Strategy::kUniform:
      totals.weight = static_cast<double>(live_);
      break;
    case Strategy::kTimestep:
      totals.weight = static_cast<double>(num_steps_);
      break;
    case Strategy::kPrioritized:
      // With no positive priority, alpha > 0 draws nothing here (as Select
      // refuses); asking for the tree then would only take an alpha's place.
      totals.weight = r.alpha > 0 && positive_ == 0 ? 0.0 : PrioritizedLocked(r.alpha).Total();
      break;
    default:
      throw InvalidArgument("TopK and Recent have no totals to draw shards by");
  }
  return totals;
}

RemoteLayout Table::Remote(const SampleRequest& r) {
  CheckRequest(r);
  std::lock_guard<std::mutex> lock(mu_);
  CheckOpenLocked();
  if (arena_->host_data() == nullptr) {
    throw InvalidArgument("a table in GPU memory cannot be read by other processes' hosts");
  }
  const SumTree* tree = nullptr;
  switch (r.strategy) {
    case Strategy::kUniform:
      tree = &uniform_->ones();
      break;
    case Strategy::kTimestep:
      tree = &TimestepLocked().tree();
      break;
    case Strategy::kPrioritized:
      tree = &PrioritizedLocked(r.alpha).tree();
      break;
    default:
      break;  // TopK and Recent: readers rank the records and stamps
  }
  RemoteLayout layout{arena_->host_data(), arena_->bytes(), &(*slots_)[0]};
  if (tree != nullptr) {
    layout.tree = tree->view();
    layout.tree_nodes = tree->node_count();
  }
  layout.stamps = stamps_.data();
  return layout;
}

StrategyTotals Table::Tops(const SampleRequest& r, TopEntry* out) {
  CheckRequest(r);
  if (r.strategy != Strategy::kTopK && r.strategy != Strategy::kRecent) {
    throw InvalidArgument("only TopK and Recent rank their items");
  }
  std::lock_guard<std::mutex> lock(mu_);
  CheckOpenLocked();
  const std::vector<int64_t> slots =
      r.strategy == Strategy::kTopK ? TopKLocked().Highest(r.count) : RecentLocked().Newest(r.count);
  for (size_t i = 0; i < slots.size(); ++i) {
    out[i] = {(*slots_)[slots[i]].priority, stamps_[slots[i]]};
  }
  return {live_, num_steps_, static_cast<double>(slots.size())};
}

void Table::EndSample(uint64_t ticket) {
  {
    std::lock_guard<std::mutex> lock(returned_mu_);
    returned_.push_back(ticket);
    has_returned_.store(true, std::memory_order_release);
  }
  // Without mu_ (see returned_): a waiter that misses this wakes within its
  // slice (WaitForTickets).
  changed_.notify_all();
}

void Table::DrainReturnedLocked() const {
  if (!has_returned_.load(std::memory_order_acquire)) return;
  std::vector<uint64_t> returned;
  {
    std::lock_guard<std::mutex> lock(returned_mu_);
    returned.swap(returned_);
    has_returned_.store(false, std::memory_order_relaxed);
  }
  for (uint64_t ticket : returned) {
    const auto it = std::lower_bound(in_flight_.begin(), in_flight_.end(), ticket);
    if (it != in_flight_.end() && *it == ticket) in_flight_.erase(it);  // else a bug upstream
  }
}

void Table::ReadSteps(int c, int64_t slot, int64_t steps, void* dst) const {
  if (c < 0 || c >= num_columns()) throw InvalidArgument("no such column");
  if (slot < 0 || slot >= spec_.capacity || steps < 0 || steps > spec_.max_length) {
    throw InvalidArgument("slot or step count out of range");
  }
  arena_->Read(dst, StepOffset(c, slot, 0), static_cast<size_t>(steps * step_bytes(c)));
}

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

void Table::DeferError(const std::string& message) {
  std::lock_guard<std::mutex> lock(deferred_mu_);
  if (has_deferred_error_.load(std::memory_order_relaxed)) {
    ++deferred_more_;
    return;
  }
  deferred_error_ = message;
  deferred_more_ = 0;
  has_deferred_error_.store(true, std::memory_order_release);
}

void Table::RaiseDeferredError() {
  if (!has_deferred_error_.load(std::memory_order_acquire)) return;
  std::string message;
  {
    std::lock_guard<std::mutex> lock(deferred_mu_);
    if (!has_deferred_error_.load(std::memory_order_relaxed)) return;  // raised by another call
    message = "a priority update from an earlier GPU program failed and changed nothing: " +
              deferred_error_;
    if (deferred_more_ > 0) {
      message += " (and " + std::to_string(deferred_more_) + " later updates failed too)";
    }
    deferred_error_.clear();
    has_deferred_error_.store(false, std::memory_order_relaxed);
  }
  throw InvalidArgument(message);
}

std::vector<ItemInfo> Table::PinItems(const int64_t* keys, int64_t count) {
  std::lock_guard<std::mutex> lock(mu_);
  CheckOpenLocked();
  std::vector<ItemInfo> items;
  auto pin = [&](int64_t slot) {
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

void Table::UnpinSlots(const std::vector<int64_t>& slots) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int64_t slot : slots) slots_->Unpin(slot);
  changed_.notify_all();
}

void Table::RestoreTimesSampled(int64_t key, int64_t times_sampled) {
  std::lock_guard<std::mutex> lock(mu_);
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
  std::lock_guard<std::mutex> lock(mu_);
  CheckOpenLocked();
  return slots_->FreeInOrder();
}

void Table::RestoreState(const Counters& counters, const std::vector<int64_t>& free_slots) {
  std::lock_guard<std::mutex> lock(mu_);
  CheckOpenLocked();
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
  slots_->SetFree(free_slots);
  changed_.notify_all();
}

Stats Table::GetStats() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t bytes_per_step = 0;
  for (const ColumnSpec& c : spec_.columns) bytes_per_step += c.step_bytes;
  Stats s;
  s.size = live_;
  s.capacity = spec_.capacity;
  s.max_length = spec_.max_length;
  s.num_steps = num_steps_;
  s.writers = writers_;
  s.pinned_slots = released_ ? 0 : slots_->pinned();
  DrainReturnedLocked();
  s.samples_in_flight = static_cast<int64_t>(in_flight_.size());
  s.counters = counters_;
  s.bytes_reserved = released_ ? 0 : static_cast<int64_t>(arena_->bytes());
  s.bytes_used = num_steps_ * bytes_per_step;
  s.seconds_alive = std::chrono::duration<double>(Clock::now() - created_at_).count();
  for (const auto& selector : prioritized_) s.alphas.push_back(selector->alpha());
  s.skipped_updates = skipped_updates_;
  return s;
}

}  // namespace gearjax
