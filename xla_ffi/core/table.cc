// Implementation of the trajectory table (see table.h for the layout and the
// invariants). Selection structures: an order-statistics tree over keys (FIFO,
// LIFO, Recent), one over (priority, key) (min-priority removal, TopK), and
// flat sum trees over slots: weight 1 per live slot (Uniform), length
// (Timestep), and priority ** alpha per Prioritized alpha. Uniform uses a sum
// tree rather than the key tree because a flat array costs a few cache misses
// per draw where the node-based tree costs one per level.
// The order-statistics trees are libstdc++'s policy-based trees: a maintained
// implementation of exactly the structure we need, rather than one of our own.
#include "table.h"

#include <ext/pb_ds/assoc_container.hpp>
#include <ext/pb_ds/tree_policy.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <utility>

#include "huge_pages.h"
#include "random.h"
#include "sum_tree.h"

namespace gearjax {
namespace {

using Clock = std::chrono::steady_clock;

template <typename K, typename V>
using OrderedMap = __gnu_pbds::tree<K, V, std::less<K>, __gnu_pbds::rb_tree_tag,
                                    __gnu_pbds::tree_order_statistics_node_update>;

constexpr size_t kPageSize = 4096;
constexpr size_t kColumnAlignment = 256;   // each column region starts on a 256 B line
constexpr size_t kMaxPriorityTrees = 8;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Validates the spec and returns the arena size; throws InvalidArgument.
size_t ArenaBytes(const TableSpec& spec) {
  if (spec.columns.empty()) throw InvalidArgument("a table needs at least one column");
  if (spec.capacity < 1) throw InvalidArgument("capacity must be >= 1");
  if (spec.max_length < 1) throw InvalidArgument("max_length must be >= 1");
  if (spec.capacity > (int64_t{1} << 31)) throw InvalidArgument("capacity must be < 2**31");
  if (spec.max_length > (int64_t{1} << 31)) throw InvalidArgument("max_length must be < 2**31");
  const int remover = static_cast<int>(spec.remover);
  if (remover < 0 || remover > 2) throw InvalidArgument("unknown remover");
  const RateLimiterSpec& l = spec.limiter;
  if (l.min_size < 1) throw InvalidArgument("min_size must be >= 1");
  if (l.min_size > spec.capacity) {
    throw InvalidArgument("min_size (" + std::to_string(l.min_size) + ") exceeds capacity (" +
                          std::to_string(spec.capacity) + "): sampling could never start");
  }
  if (!(l.samples_per_insert >= 0) || !std::isfinite(l.samples_per_insert)) {
    throw InvalidArgument("samples_per_insert must be finite and >= 0");
  }
  if (!(l.min_diff <= l.max_diff)) throw InvalidArgument("min_diff must be <= max_diff");
  if (!(l.timeout_seconds >= 0) || !std::isfinite(l.timeout_seconds)) {
    throw InvalidArgument("timeout must be finite and >= 0");
  }
  size_t total = 0;
  const size_t slot_steps = static_cast<size_t>(spec.capacity) * spec.max_length;
  for (const ColumnSpec& c : spec.columns) {
    if (c.step_bytes < 1) throw InvalidArgument("column '" + c.name + "' has an empty step");
    if (static_cast<int64_t>(c.pad_step.size()) != c.step_bytes) {
      throw InvalidArgument("column '" + c.name + "': pad bytes do not match the step size");
    }
    if (slot_steps > (size_t{1} << 62) / static_cast<size_t>(c.step_bytes)) {
      throw InvalidArgument("the table is too large to address");
    }
    total = RoundUp(total, kColumnAlignment) + slot_steps * c.step_bytes;
    if (total > (size_t{1} << 62)) throw InvalidArgument("the table is too large to address");
  }
  for (const ColumnSpec& c : spec.columns) total += c.step_bytes;  // pad steps, after the columns
  return total;
}

}  // namespace

Arena::Arena(size_t bytes, bool gpu_mapped, bool on_device) : bytes_(bytes) {
  const size_t n = std::max<size_t>(bytes, 1);
  if (on_device) {
    const DeviceMemory* memory = GetDeviceMemory();
    if (memory == nullptr) {
      throw InvalidArgument("placement 'device' needs a GPU, and this process has none (or "
                            "gearjax was built without CUDA)");
    }
    device_ = static_cast<uint8_t*>(memory->allocate(n));
    if (device_ == nullptr) throw std::bad_alloc();
    device_memory_ = memory;
    return;
  }
  if (gpu_mapped && GetMappedAllocator() != nullptr) {
    void* device = nullptr;
    host_ = static_cast<uint8_t*>(GetMappedAllocator()->allocate(n, &device));
    if (host_ != nullptr) {
      mapped_by_ = GetMappedAllocator();
      device_ = static_cast<uint8_t*>(device);
      return;
    }
  }
  // Sampling reads windows scattered over the whole arena: with 4 KiB pages
  // nearly every row also costs a TLB miss. Arenas of 4 MiB and more are
  // huge-page aligned and ask for transparent huge pages (which the kernel may
  // decline); smaller ones stay on 4 KiB pages so a tiny table never commits
  // 2 MiB. Memory is committed only when touched either way.
  const bool huge = bytes >= 2 * kHugePageSize;
  const size_t alignment = huge ? kHugePageSize : kPageSize;
  const size_t rounded = RoundUp(n, alignment);
  host_ = static_cast<uint8_t*>(std::aligned_alloc(alignment, rounded));
  if (host_ == nullptr) throw std::bad_alloc();
  if (huge) AdviseHugePages(host_, rounded);
}

Arena::~Arena() {
  if (device_memory_ != nullptr) {
    device_memory_->release(device_);
  } else if (mapped_by_ != nullptr) {
    mapped_by_->release(host_);
  } else {
    std::free(host_);
  }
}

void Arena::Write(size_t offset, const void* src, size_t n) {
  if (device_memory_ != nullptr) {
    device_memory_->copy_in(device_ + offset, src, n);
  } else {
    std::memcpy(host_ + offset, src, n);
  }
}

void Arena::Read(void* dst, size_t offset, size_t n) const {
  if (device_memory_ != nullptr) {
    device_memory_->copy_out(dst, device_ + offset, n);
  } else {
    std::memcpy(dst, host_ + offset, n);
  }
}

struct Table::Index {
  Index(int64_t capacity, bool gpu_mapped)
      : live(capacity, gpu_mapped), lengths(capacity, gpu_mapped) {}
  OrderedMap<int64_t, int64_t> by_key;                           // key -> slot
  OrderedMap<std::pair<double, int64_t>, int64_t> by_priority;   // (priority, key) -> slot
  SumTree live;                                                  // 1 per live slot
  SumTree lengths;
  std::vector<std::pair<double, SumTree>> priority_trees;        // (alpha, tree)

  SumTree* FindTree(double alpha) {
    for (auto& [a, tree] : priority_trees) {
      if (a == alpha) return &tree;
    }
    return nullptr;
  }
};

Table::Table(TableSpec spec)
    : spec_(std::move(spec)),
      arena_(ArenaBytes(spec_), spec_.gpu_mapped, spec_.on_device),
      created_at_(Clock::now()),
      state_(spec_.capacity, SlotState::kFree),
      key_(spec_.capacity, spec_.gpu_mapped),
      length_(spec_.capacity, spec_.gpu_mapped),
      priority_(spec_.capacity, 0.0),
      pins_(spec_.capacity, 0),
      index_(std::make_unique<Index>(spec_.capacity, spec_.gpu_mapped)) {
  size_t offset = 0;
  const size_t slot_steps = static_cast<size_t>(spec_.capacity) * spec_.max_length;
  for (const ColumnSpec& c : spec_.columns) {
    offset = RoundUp(offset, kColumnAlignment);
    column_offset_.push_back(offset);
    offset += slot_steps * c.step_bytes;
  }
  for (const ColumnSpec& c : spec_.columns) {
    pad_one_byte_.push_back(std::all_of(c.pad_step.begin(), c.pad_step.end(),
                                        [&](uint8_t b) { return b == c.pad_step[0]; }));
    pad_offsets_.push_back(offset);
    arena_.Write(offset, c.pad_step.data(), c.step_bytes);
    offset += c.step_bytes;
  }
  // Free slots are handed out lowest first (popped from the back).
  free_slots_.reserve(spec_.capacity);
  for (int64_t s = spec_.capacity - 1; s >= 0; --s) free_slots_.push_back(s);
}

Table::~Table() = default;

void Table::CheckOpenLocked() const {
  if (closed_) throw Closed("the table is closed");
}

bool Table::closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

void Table::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  changed_.notify_all();
}

double Table::PriorityWeight(double priority, double alpha) const {
  return alpha == 1.0 ? priority : std::pow(priority, alpha);
}

bool Table::CanSampleLocked(int64_t batch) const {
  const RateLimiterSpec& l = spec_.limiter;
  if (live_ < l.min_size) return false;
  const double diff = static_cast<double>(counters_.inserts) * l.samples_per_insert - counters_.samples;
  return diff - static_cast<double>(batch) >= l.min_diff;
}

bool Table::CanInsertLocked() const {
  const RateLimiterSpec& l = spec_.limiter;
  // `writers_` counts inserts admitted but not yet published.
  if (live_ + writers_ < l.min_size) return true;
  const double inserts = static_cast<double>(counters_.inserts + writers_ + 1);
  return inserts * l.samples_per_insert - counters_.samples <= l.max_diff;
}

std::string Table::LimiterStateLocked() const {
  const RateLimiterSpec& l = spec_.limiter;
  std::ostringstream out;
  out << "size=" << live_ << ", min_size=" << l.min_size << ", inserts=" << counters_.inserts
      << ", samples=" << counters_.samples;
  if (l.samples_per_insert > 0) {
    out << ", samples_per_insert=" << l.samples_per_insert << ", allowed diff=[" << l.min_diff
        << ", " << l.max_diff << "]";
  }
  return out.str();
}

int64_t Table::AcquireSlotLocked(std::unique_lock<std::mutex>& lock, bool* evicted) {
  *evicted = false;
  for (;;) {
    while (!free_slots_.empty()) {
      const int64_t slot = free_slots_.back();
      free_slots_.pop_back();
      // Restores take slots out of order and leave their entries behind.
      if (state_[slot] == SlotState::kFree) return slot;
    }
    if (live_ > 0) {
      int64_t victim = -1;
      switch (spec_.remover) {
        case Remover::kFifo: victim = index_->by_key.begin()->second; break;
        case Remover::kLifo: victim = std::prev(index_->by_key.end())->second; break;
        case Remover::kMinPriority: victim = index_->by_priority.begin()->second; break;
      }
      EvictLocked(victim);
      *evicted = true;
      return victim;
    }
    // Every slot is being written by another inserter; copies are finite, so
    // one is published soon.
    changed_.wait(lock, [&] { return closed_ || !free_slots_.empty() || live_ > 0; });
    CheckOpenLocked();
  }
}

void Table::EvictLocked(int64_t slot) {
  index_->by_key.erase(key_[slot]);
  index_->by_priority.erase({priority_[slot], key_[slot]});
  index_->live.Set(slot, 0.0);
  index_->lengths.Set(slot, 0.0);
  for (auto& [alpha, tree] : index_->priority_trees) tree.Set(slot, 0.0);
  --live_;
  num_steps_ -= length_[slot];
  ++counters_.evictions;
  state_[slot] = SlotState::kWriting;  // key_ and length_ stay until republished
}

void Table::PublishLocked(int64_t slot, int64_t key, int64_t length, double priority) {
  state_[slot] = SlotState::kLive;
  key_[slot] = key;
  length_[slot] = length;
  priority_[slot] = priority;
  index_->by_key.insert({key, slot});
  index_->by_priority.insert({{priority, key}, slot});
  index_->live.Set(slot, 1.0);
  index_->lengths.Set(slot, static_cast<double>(length));
  for (auto& [alpha, tree] : index_->priority_trees) tree.Set(slot, PriorityWeight(priority, alpha));
  ++live_;
  num_steps_ += length;
}

int64_t Table::Insert(const std::vector<const void*>& sources, int64_t length, double priority,
                      int64_t restore_key, int64_t restore_slot) {
  if (sources.size() != spec_.columns.size()) {
    throw InvalidArgument("expected " + std::to_string(spec_.columns.size()) + " columns, got " +
                          std::to_string(sources.size()));
  }
  return InsertWith(
      length, priority,
      [&](int64_t slot) {
        for (size_t c = 0; c < sources.size(); ++c) {
          const int column = static_cast<int>(c);
          arena_.Write(StepOffset(column, slot, 0), sources[c],
                       static_cast<size_t>(length * spec_.columns[c].step_bytes));
        }
      },
      restore_key, restore_slot);
}

int64_t Table::InsertWith(int64_t length, double priority, const Fill& fill,
                          int64_t restore_key, int64_t restore_slot) {
  if (length < 1 || length > spec_.max_length) {
    throw InvalidArgument("trajectory length " + std::to_string(length) + " is outside [1, " +
                          std::to_string(spec_.max_length) + "]");
  }
  if (!std::isfinite(priority) || priority < 0) {
    throw InvalidArgument("priority must be finite and >= 0, got " + std::to_string(priority));
  }
  const bool restoring = restore_key >= 0;
  std::unique_lock<std::mutex> lock(mu_);
  CheckOpenLocked();
  for (auto& [alpha, tree] : index_->priority_trees) {
    if (!std::isfinite(PriorityWeight(priority, alpha))) {
      throw InvalidArgument("priority " + std::to_string(priority) + " ** alpha " +
                            std::to_string(alpha) + " overflows float64");
    }
  }
  if (restoring && restore_key < counters_.next_key) {
    throw InvalidArgument("restored keys must increase");
  }
  if (restoring && (restore_slot < 0 || restore_slot >= spec_.capacity ||
                    state_[restore_slot] != SlotState::kFree)) {
    throw InvalidArgument("restored slot " + std::to_string(restore_slot) + " is not free");
  }
  // Checkpoint restores bypass the limiter: they recreate state, not traffic.
  if (!restoring && !CanInsertLocked()) {
    const auto deadline =
        Clock::now() + std::chrono::duration<double>(spec_.limiter.timeout_seconds);
    if (!changed_.wait_until(lock, deadline, [&] { return closed_ || CanInsertLocked(); })) {
      throw Timeout("insert timed out after " + std::to_string(spec_.limiter.timeout_seconds) +
                    " s: the rate limiter holds inserts back until more is sampled (" +
                    LimiterStateLocked() + ")");
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
      throw;
    }
  }
  state_[slot] = SlotState::kWriting;
  // Samplers that drew this slot before it was evicted may still read it: CPU
  // ones hold pins; GPU ones enqueued up to now hold tickets.
  const uint64_t evicted_at = gpu_tickets_;
  changed_.wait(lock, [&] {
    return pins_[slot] == 0 && (!evicted || GpuQuietSince(evicted_at));
  });
  lock.unlock();

  // Back to the free list (a restored slot never left it); the caller holds
  // the lock.
  auto abandon = [&] {
    --writers_;
    state_[slot] = SlotState::kFree;
    if (!restoring) free_slots_.push_back(slot);
    changed_.notify_all();
  };
  try {
    fill(slot);
  } catch (...) {
    lock.lock();
    abandon();
    throw;
  }

  lock.lock();
  if (closed_) {
    abandon();
    throw Closed("the table was closed during the insert");
  }
  --writers_;
  const int64_t key = restoring ? restore_key : counters_.next_key;
  counters_.next_key = key + 1;
  ++counters_.inserts;
  PublishLocked(slot, key, length, priority);
  changed_.notify_all();
  return key;
}

int64_t Table::DrawSlotLocked(const SampleRequest& r, double u, float* probability) const {
  auto uniform_rank = [u](int64_t n) { return std::min<int64_t>(static_cast<int64_t>(u * n), n - 1); };
  switch (r.strategy) {
    case Strategy::kUniform: {
      *probability = static_cast<float>(1.0 / live_);
      return index_->live.Draw(u);
    }
    case Strategy::kRecent: {
      const int64_t m = std::min<int64_t>(static_cast<int64_t>(r.param), live_);
      *probability = static_cast<float>(1.0 / m);
      return index_->by_key.find_by_order(live_ - 1 - uniform_rank(m))->second;
    }
    case Strategy::kTopK: {
      const int64_t m = std::min<int64_t>(static_cast<int64_t>(r.param), live_);
      *probability = static_cast<float>(1.0 / m);
      return index_->by_priority.find_by_order(live_ - 1 - uniform_rank(m))->second;
    }
    case Strategy::kTimestep: {
      const int64_t slot = index_->lengths.Draw(u);
      *probability = static_cast<float>(index_->lengths.Get(slot) / index_->lengths.Total());
      return slot;
    }
    case Strategy::kPrioritized: {
      const SumTree* tree = index_->FindTree(r.param);
      const int64_t slot = tree->Draw(u);
      *probability = static_cast<float>(tree->Get(slot) / tree->Total());
      return slot;
    }
  }
  return -1;  // unreachable: the strategy was validated
}

void Table::EnsurePriorityTree(double alpha) {
  if (!std::isfinite(alpha) || alpha < 0) {
    throw InvalidArgument("alpha must be finite and >= 0, got " + std::to_string(alpha));
  }
  std::lock_guard<std::mutex> lock(mu_);
  CheckOpenLocked();
  if (index_->FindTree(alpha) != nullptr) return;
  if (index_->priority_trees.size() >= kMaxPriorityTrees) {
    throw InvalidArgument("a table keeps at most " + std::to_string(kMaxPriorityTrees) +
                          " Prioritized alphas; this one would be one more");
  }
  SumTree tree(spec_.capacity, spec_.gpu_mapped);
  for (const auto& [key, slot] : index_->by_key) {
    const double w = PriorityWeight(priority_[slot], alpha);
    if (!std::isfinite(w)) {
      throw InvalidArgument("priority " + std::to_string(priority_[slot]) + " ** alpha " +
                            std::to_string(alpha) + " overflows float64");
    }
    tree.Set(slot, w);
  }
  index_->priority_trees.emplace_back(alpha, std::move(tree));
}

void Table::CheckRequest(const SampleRequest& r) const {
  if (r.batch < 1) throw InvalidArgument("batch_size must be >= 1");
  if (r.window < 0 || r.window > spec_.max_length) {
    throw InvalidArgument("window must be in [1, max_length=" + std::to_string(spec_.max_length) +
                          "] (or whole trajectories)");
  }
  const int strategy = static_cast<int>(r.strategy);
  if (strategy < 0 || strategy > 4) throw InvalidArgument("unknown sampling strategy");
  if ((r.strategy == Strategy::kTopK || r.strategy == Strategy::kRecent) && !(r.param >= 1)) {
    throw InvalidArgument("TopK and Recent need a count >= 1");
  }
}

void Table::WaitToSampleLocked(std::unique_lock<std::mutex>& lock, const SampleRequest& r) {
  CheckOpenLocked();
  if (!CanSampleLocked(r.batch)) {
    const double timeout = spec_.limiter.timeout_seconds;
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout);
    if (!changed_.wait_until(lock, deadline, [&] { return closed_ || CanSampleLocked(r.batch); })) {
      if (live_ == 0 && timeout == 0) {
        throw Timeout("cannot sample: the table is empty (insert trajectories first, or give the "
                      "table a rate_limiter with a timeout to wait for them)");
      }
      throw Timeout("cannot sample " + std::to_string(r.batch) + " items: the rate limiter held "
                    "sampling back for " + std::to_string(timeout) + " s (" +
                    LimiterStateLocked() + ")");
    }
    CheckOpenLocked();
  }
  if (r.strategy == Strategy::kPrioritized && !(index_->FindTree(r.param)->Total() > 0)) {
    throw InvalidArgument("cannot sample with Prioritized: every stored trajectory has priority 0");
  }
}

void Table::Select(const SampleRequest& r, const uint32_t seed[2], Draw* draws) {
  CheckRequest(r);
  if (r.strategy == Strategy::kPrioritized) EnsurePriorityTree(r.param);
  std::unique_lock<std::mutex> lock(mu_);
  WaitToSampleLocked(lock, r);
  for (int64_t b = 0; b < r.batch; ++b) {
    const Words4 words = RowWords(seed, b);
    const uint32_t* w = words.w;
    Draw& d = draws[b];
    d.slot = DrawSlotLocked(r, UniformFromBits(w[0], w[1]), &d.probability);
    d.key = key_[d.slot];
    d.length = length_[d.slot];
    d.start = r.window == 0 ? 0 : static_cast<int64_t>(BelowFromBits(w[2], w[3], d.length));
    d.table_size = live_;
    if (pins_[d.slot]++ == 0) ++pinned_slots_;
  }
  counters_.samples += static_cast<double>(r.batch);
  changed_.notify_all();  // inserters may be waiting on the limiter
}

uint64_t Table::BeginGpuSample(const SampleRequest& r, GpuSelection* selection) {
  CheckRequest(r);
  if (r.strategy == Strategy::kTopK || r.strategy == Strategy::kRecent) {
    throw InvalidArgument("TopK and Recent are not selected on the GPU");
  }
  if (key_.device_data() == nullptr || length_.device_data() == nullptr) {
    throw InvalidArgument("this table's selection state is not GPU-mapped");
  }
  if (r.strategy == Strategy::kPrioritized) EnsurePriorityTree(r.param);
  std::unique_lock<std::mutex> lock(mu_);
  WaitToSampleLocked(lock, r);
  const SumTree* tree = nullptr;
  switch (r.strategy) {
    case Strategy::kUniform: tree = &index_->live; break;
    case Strategy::kTimestep: tree = &index_->lengths; break;
    default: tree = index_->FindTree(r.param); break;  // Prioritized
  }
  if (tree->device_nodes() == nullptr) throw InvalidArgument("the sum tree is not GPU-mapped");
  *selection = GpuSelection{tree->device_nodes(), tree->leaves(), key_.device_data(),
                            length_.device_data(), live_};
  counters_.samples += static_cast<double>(r.batch);
  const uint64_t ticket = ++gpu_tickets_;
  gpu_in_flight_.insert(ticket);
  changed_.notify_all();  // inserters may be waiting on the limiter
  return ticket;
}

void Table::EndGpuSample(uint64_t ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  gpu_in_flight_.erase(ticket);
  changed_.notify_all();
}

void Table::ReadSteps(int c, int64_t slot, int64_t steps, void* dst) const {
  if (c < 0 || c >= num_columns()) throw InvalidArgument("no such column");
  if (slot < 0 || slot >= spec_.capacity || steps < 0 || steps > spec_.max_length) {
    throw InvalidArgument("slot or step count out of range");
  }
  arena_.Read(dst, StepOffset(c, slot, 0), static_cast<size_t>(steps * step_bytes(c)));
}

void Table::Release(const Draw* draws, int64_t count) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int64_t b = 0; b < count; ++b) {
    if (--pins_[draws[b].slot] == 0) --pinned_slots_;
  }
  changed_.notify_all();
}

void Table::SetPriorityLocked(int64_t slot, double priority) {
  const int64_t key = key_[slot];
  index_->by_priority.erase({priority_[slot], key});
  index_->by_priority.insert({{priority, key}, slot});
  priority_[slot] = priority;
  for (auto& [alpha, tree] : index_->priority_trees) tree.Set(slot, PriorityWeight(priority, alpha));
}

int64_t Table::UpdatePriorities(const int64_t* keys, const double* priorities, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    if (!std::isfinite(priorities[i]) || priorities[i] < 0) {
      throw InvalidArgument("priorities must be finite and >= 0; entry " + std::to_string(i) +
                            " is " + std::to_string(priorities[i]));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  CheckOpenLocked();
  for (int64_t i = 0; i < count; ++i) {
    for (auto& [alpha, tree] : index_->priority_trees) {
      if (!std::isfinite(PriorityWeight(priorities[i], alpha))) {
        throw InvalidArgument("priority " + std::to_string(priorities[i]) + " ** alpha " +
                              std::to_string(alpha) + " overflows float64");
      }
    }
  }
  int64_t updated = 0;
  for (int64_t i = 0; i < count; ++i) {
    auto it = index_->by_key.find(keys[i]);
    if (it == index_->by_key.end()) continue;
    SetPriorityLocked(it->second, priorities[i]);
    ++updated;
  }
  counters_.priority_updates += updated;
  return updated;
}

std::vector<ItemInfo> Table::PinItems(const int64_t* keys, int64_t count) {
  std::lock_guard<std::mutex> lock(mu_);
  CheckOpenLocked();
  std::vector<ItemInfo> items;
  auto pin = [&](int64_t key, int64_t slot) {
    items.push_back({key, slot, length_[slot], priority_[slot]});
    if (pins_[slot]++ == 0) ++pinned_slots_;
  };
  if (keys == nullptr) {
    items.reserve(live_);
    for (const auto& [key, slot] : index_->by_key) pin(key, slot);
  } else {
    for (int64_t i = 0; i < count; ++i) {
      auto it = index_->by_key.find(keys[i]);
      if (it != index_->by_key.end()) pin(it->first, it->second);
    }
  }
  return items;
}

void Table::UnpinSlots(const std::vector<int64_t>& slots) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int64_t slot : slots) {
    if (--pins_[slot] == 0) --pinned_slots_;
  }
  changed_.notify_all();
}

std::vector<int64_t> Table::FreeSlots() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int64_t> free;
  for (int64_t slot : free_slots_) {
    if (state_[slot] == SlotState::kFree) free.push_back(slot);
  }
  return free;
}

void Table::RestoreState(const Counters& counters, const std::vector<int64_t>& free_slots) {
  std::lock_guard<std::mutex> lock(mu_);
  CheckOpenLocked();
  if (counters.next_key < counters_.next_key) {
    throw InvalidArgument("restored next_key is below a key already in the table");
  }
  std::vector<bool> seen(spec_.capacity, false);
  for (int64_t slot : free_slots) {
    if (slot < 0 || slot >= spec_.capacity || seen[slot] || state_[slot] != SlotState::kFree) {
      throw InvalidArgument("restored free slots do not match the slots in use");
    }
    seen[slot] = true;
  }
  if (static_cast<int64_t>(free_slots.size()) != spec_.capacity - live_ - writers_) {
    throw InvalidArgument("restored free slots do not match the slots in use");
  }
  counters_ = counters;
  free_slots_ = free_slots;
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
  s.pinned_slots = pinned_slots_;
  s.gpu_samples_in_flight = static_cast<int64_t>(gpu_in_flight_.size());
  s.counters = counters_;
  s.bytes_reserved = static_cast<int64_t>(arena_.bytes());
  s.bytes_used = num_steps_ * bytes_per_step;
  s.seconds_alive = std::chrono::duration<double>(Clock::now() - created_at_).count();
  return s;
}

}  // namespace gearjax
