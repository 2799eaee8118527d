// The trajectory table: composes the storage (storage.h), the slots and keys
// (slots.h), the selectors (selectors/), the remover (removers.h) and the rate
// limiter (rate_limiter.h) under one mutex, and owns the slot lifecycle. CPU
// and CUDA handlers both sample through this class; only the byte copying
// differs between them.
//
// Invariants (all guarded by the mutex):
//  * A slot is selectable iff it is live. Only live slots are in the selectors.
//  * Every sample takes a ticket (increasing) when it draws (Select, or
//    TableGpu::BeginSample for GPU samples that draw on the device) and returns it
//    when it has copied its windows (EndSample; for the GPU, once the stream
//    has passed its kernels). A writer takes its slot out of every selector
//    first, so no later sample can draw it, then waits until every sample
//    that took its ticket before the eviction has ended before copying into
//    the slot. So no sample ever sees a window that is half old, half new.
//    (Tickets rather than a pin per drawn slot: a sample then writes nothing
//    per row, and returning it is one step.)
//  * Readers that copy trajectories out at leisure (contents, get, save) pin
//    the slots they read instead; a writer also waits for its slot's pins.
//  * Keys are assigned when a trajectory is published (see slots.h): unique,
//    increasing with publication order, never reused.
//  * Each published slot also gets an insertion stamp (ns since the Unix
//    epoch by the host's clock, strictly increasing within the table, so in
//    key order): the clock that orders the shards of a sharded table against
//    each other for TopK and Recent (sharding.h). Checkpoints keep it. A slot keeps its key and
//    length until it is republished, so a GPU sample that drew it just before
//    its eviction reports the key of the data it read.
//  * With max_times_sampled = n > 0, every draw counts against its
//    trajectory (times_sampled_), and the draw that reaches n removes it at
//    once: out of every selector, its slot back on the free list, counted as
//    an eviction (as Reverb deletes an item after its n-th sample). The slot
//    remembers the ticket of the sample that removed it (freed_at_), and a
//    writer that takes it waits for that sample like for an evicting one.
//  * After Close, every call fails with Closed; the memory is released once no
//    sample, reader or writer is inside the table any more.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/common.h"
#include "core/draw.h"
#include "core/forks.h"
#include "core/gpu/deferred_error.h"
#include "core/gpu/gpu_updates.h"
#include "core/limits.h"
#include "core/random.h"
#include "core/sample_request.h"
#include "core/selectors/constrained.h"
#include "core/selectors/selector.h"
#include "core/selectors/selector_set.h"
#include "core/selectors/strategies.h"
#include "core/selectors/sum_tree.h"
#include "core/sharding/exchange_counters.h"
#include "core/table/rate_limiter.h"
#include "core/table/removers.h"
#include "core/table/sample_tickets.h"
#include "core/table/slots.h"
#include "core/table/storage.h"
#include "core/table/table_reports.h"
#include "core/table/table_spec.h"
#include "core/thread_annotations.h"
#include "core/window.h"

namespace gearjax {

class GpuCompletions;  // gpu/gpu_completions.h
class GpuStaging;      // gpu/gpu_staging.h
class LengthBuckets;   // selectors/length_buckets.h
class LengthIndex;     // selectors/length_index.h

class Table {
 public:
  explicit Table(TableSpec spec);  // throws InvalidArgument, std::bad_alloc
  ~Table();

  const TableSpec& spec() const { return spec_; }
  // "table 'name' (handle h)" or "table (handle h)", for error messages.
  std::string Describe(int64_t handle) const;
  int num_columns() const { return static_cast<int>(spec_.columns.size()); }
  int64_t step_bytes(int c) const { return spec_.columns[c].step_bytes; }
  const KeyLayout& key_layout() const { return key_layout_; }
  size_t StepOffset(int c, int64_t slot, int64_t step) const {
    return layout_.StepOffset(c, slot, step);
  }
  // The same step in host memory; host arenas only (CPU gathers), while the
  // slot is pinned.
  const uint8_t* StepPointer(int c, int64_t slot, int64_t step) const {
    return arena_->host_data() + StepOffset(c, slot, step);
  }
  // The arena in host memory; nullptr when it lives on the GPU.
  uint8_t* arena_data() const { return arena_->host_data(); }
  bool on_device() const { return arena_->on_device(); }
  // Where GPU kernels see the arena; nullptr when it is neither GPU-mapped
  // nor on the GPU.
  const uint8_t* device_arena() const { return arena_->device_data(); }
  size_t column_offset(int c) const { return layout_.column_offset(c); }
  size_t pad_offset(int c) const { return layout_.pad_offset(c); }
  bool pad_is_one_byte(int c) const { return layout_.pad_is_one_byte(c); }

  // Copies `length` steps of every column (sources[c] holds length *
  // step_bytes(c) contiguous bytes) into a slot and publishes it. Evicts by the
  // remover when full; waits on the rate limiter. Checkpoint restores pass
  // `restore_key` >= 0 (above every key so far, naming `restore_slot`, which
  // must be free) and bypass the limiter; `restore_stamp` >= 0 restores the
  // insertion stamp too (above every stamp so far, below kMaxStamp), -1 takes
  // a new one. On a table with step priorities, `steps` (length of them,
  // each checked) sets them and `priority` is ignored for their largest;
  // null sets every step to `priority`. Call without the GIL: it may wait.
  int64_t Insert(const std::vector<const void*>& sources, int64_t length, double priority,
                 int64_t restore_key = -1, int64_t restore_slot = -1,
                 int64_t restore_stamp = -1, const double* steps = nullptr);

  // Insert's slot lifecycle with the copy left to the caller: `fill(slot)`
  // runs without the mutex, once the slot is reserved and no sampler can read
  // it, and must have written `length` steps of every column (at StepOffset)
  // when it returns. If it throws, the slot goes back to the free list (data
  // it evicted stays evicted) and the exception propagates.
  using Fill = std::function<void(int64_t slot)>;
  int64_t InsertWith(int64_t length, double priority, const Fill& fill,
                     int64_t restore_key = -1, int64_t restore_slot = -1,
                     int64_t restore_stamp = -1, const double* steps = nullptr);

  // Refuses (InvalidArgument) n inserts where fewer keys or insertion stamps
  // are left: a caller inserting n trajectories one at a time asks first, so
  // it is refused whole rather than part-way (threads inserting meanwhile may
  // still take the last keys first). InsertManyWith asks it itself.
  void CheckKeysLeft(int64_t n) const;

  // InsertWith for n trajectories (lengths and priorities all checked first:
  // bad input inserts nothing) with one fill per chunk of rows: the rows of a
  // chunk (at most half the slots) reserve their slots one after another, as
  // InsertWith does, then `fill(first_row, slots, count)` writes all of them
  // at once (a GPU copy can then enqueue every row and synchronise once), then
  // they are published in order into keys[]. `*inserted` counts the rows
  // published; on an error the rows reserved before it are still filled and
  // published, then the error propagates. Call without the GIL.
  using FillMany = std::function<void(int64_t first_row, const int64_t* slots, int64_t count)>;
  int64_t InsertManyWith(int64_t n, const int64_t* lengths, const double* priorities,
                         const FillMany& fill, int64_t* keys, int64_t* inserted);

  // Copies the first `steps` steps of column c of `slot` to dst. The caller
  // holds a pin on the slot (PinItems), so it cannot change meanwhile.
  void ReadSteps(int c, int64_t slot, int64_t steps, void* dst) const;

  // Draws request.batch rows; waits on the rate limiter. `seed` (two words)
  // determines every draw (see random.h). Returns the sample's ticket, to hand
  // back with EndSample once the windows are copied.
  //
  // Constrained requests (Constrained below) draw exactly among the eligible
  // items: cut kFull with replacement by Uniform, Timestep or Prioritized by
  // rejection from the strategy's selector (SelectFullLocked), PrioritizedSteps
  // from its full-window tree, the others by listing them
  // (selectors/constrained.h). An item is eligible when it has at least
  // `window` steps under Cut::kFull and has draws left under
  // max_times_sampled. Uniform gives every eligible item weight 1, Timestep
  // its length (its number of full windows, length - window + 1, under
  // kFull), Prioritized priority ** alpha (priority 0 never drawn when alpha
  // > 0); TopK and Recent give weight 1 to the best `count` eligible items
  // and 0 to the rest. Such a request waits, like for the rate limiter and
  // within the same timeout, until the eligible items can serve the batch
  // (at least one item; `batch` of them without replacement; budgets adding
  // up to `batch` under max_times_sampled), then fails with Timeout, or at
  // once with InvalidArgument when the limiter's timeout is 0.
  uint64_t Select(const SampleRequest& request, const uint32_t seed[2], Draw* draws);

  // The sampling contract's one check in the core: the request's batch,
  // window, cut and strategy (with its alpha or count) against the limits and
  // this table's max_length; throws InvalidArgument naming what is wrong.
  // Every sampling entry calls it (Select, the GPU and shard paths, the FFI
  // handlers' BindSampleCall before they check their buffers).
  void CheckRequest(const SampleRequest& request) const;

  // Whether `request` is constrained (needs the exact host draw): cut kFull,
  // no replacement, or a table with max_times_sampled.
  bool Constrained(const SampleRequest& request) const {
    return request.cut == Cut::kFull || !request.replace || spec_.max_times_sampled > 0;
  }
  // Whether the GPU handler must select `request` on the host: TopK, Recent
  // and constrained requests (cut="full", replace=False, max_times_sampled).
  bool SelectsOnHost(const SampleRequest& request) const {
    return Ranks(request.strategy) || Constrained(request);
  }
  // Hands back a sample's ticket (Select's, or TableGpu::BeginSample's once
  // the stream has passed its kernels). From any thread.
  void EndSample(uint64_t ticket);
  // The GPU side's calls (GPU samples and priority updates, the completion
  // ring, the device checks) are TableGpu's (table_gpu.h).

  // The totals of a Uniform, Timestep or Prioritized request, in one
  // consistent snapshot. Creates the Prioritized alpha's sum tree if the table
  // has none yet (it takes one of the kMaxPriorityTrees places, as a sample
  // would). Does not wait on the rate limiter and counts nothing.
  StrategyTotals Totals(const SampleRequest& request);

  // A TopK(count) or Recent(count) request's best list (see TopEntry): the
  // min(count, size) items it draws from, best first, into out[0..); returns
  // the size, steps, and the number of entries written as the weight, in one
  // consistent snapshot. Counts nothing and does not wait on the limiter.
  StrategyTotals Tops(const SampleRequest& request, TopEntry* out);

  // The memory a one-sided reader needs to draw by `request`'s strategy and
  // read windows, creating the strategy's tree like Totals (TopK and Recent
  // have none: their readers rank the slot records and stamps). Host arenas
  // only.
  RemoteLayout Remote(const SampleRequest& request);

  // Sets priorities of the keys still live; others are skipped (and counted
  // in Stats::skipped_updates unless negative: -1 stands for "not this
  // table's", see sharding.h). All values are checked first (CheckPriority):
  // on error nothing changes. Later duplicates win. Returns how many entries
  // named a live key.
  int64_t UpdatePriorities(const int64_t* keys, const double* priorities, int64_t count);

  // Step priorities (a table made with step_priorities): row b names
  // keys[b] and its `width` entries steps[b * width + j] (a step of that
  // trajectory; < 0: skipped, as padding) and priorities[b * width + j].
  // Every named step of a live key must lie within its trajectory, and every
  // priority of a named step be valid, or nothing changes (InvalidArgument);
  // rows naming no live key are skipped and counted (skipped_updates). A
  // step named twice ends with its last entry. Each trajectory's own
  // priority becomes the largest of its steps'. Returns the rows that named
  // a live key.
  int64_t UpdateStepPriorities(const int64_t* keys, const int64_t* steps,
                               const double* priorities, int64_t rows, int64_t width);
  // Whether the table keeps a priority per step (TableSpec::step_priorities).
  bool keeps_step_priorities() const { return spec_.step_priorities; }

  // Errors that could not fail the call that caused them (deferred_error.h):
  // a priority update applied by a GPU stream callback keeps its error here,
  // and the next RaiseDeferredError throws it, once. The FFI handlers' table
  // lookup (registry.h) and the Python Table's methods call it.
  void DeferError(const std::string& message);
  void RaiseDeferredError();

  // What GPU priority updates (TableGpu::BeginUpdate) reported so far
  // (zeros before the first), which Stats and checkpoints add to the host's.
  GpuUpdateReport GpuUpdateCounts() const;

  // Pins live slots and lists them in key order (for checkpoints and reads);
  // UnpinSlots releases them. With keys == nullptr, every live item;
  // otherwise those of `keys` still live, in the order given. Given
  // `step_priorities` (a table that keeps them), fills it with the listed
  // items' step priorities back to back, read in the same hold of the mutex:
  // read later, a priority update in between could leave an item's priority
  // other than the largest of its steps'.
  std::vector<ItemInfo> PinItems(const int64_t* keys = nullptr, int64_t count = 0,
                                 std::vector<double>* step_priorities = nullptr);
  void UnpinSlots(const std::vector<int64_t>& slots);
  // What a checkpoint saves, all of it at one moment (one hold of the
  // mutex): every live item pinned (PinItems), the counters, the free slots
  // and, in a table that keeps them, the items' step priorities (Snapshot).
  // Inserts in flight are not in it: their slots count as free. Release the
  // pins with UnpinSlots.
  Snapshot PinSnapshot();

  // Checkpoint restores: sets how often the live item `key` was drawn so
  // far, in [0, max_times_sampled) (0 when the table has no
  // max_times_sampled).
  void RestoreTimesSampled(int64_t key, int64_t times_sampled);

  // Free slots as kept (inserts take them from the back).
  std::vector<int64_t> FreeSlots() const;
  // Ends a checkpoint restore: counters, and the free-slot order, which must
  // list exactly the slots not in use.
  void RestoreState(const Counters& counters, const std::vector<int64_t>& free_slots);
  Stats GetStats() const;
  // The alphas of `strategy` (Prioritized or PrioritizedSteps) that have a
  // sum tree (at most kMaxPriorityTrees each).
  std::vector<double> Alphas(Strategy strategy = Strategy::kPrioritized) const;

  // Closes the table: every waiter wakes and fails, every later call fails
  // with Closed. Waits up to `wait_seconds` for the samples, readers and
  // writers inside the table to leave, then releases its memory and returns
  // true; returns false if they did not leave in time (the memory then goes
  // with the last reference to the table).
  bool Close(double wait_seconds);
  bool closed() const;
  // A reader of the table's memory by address outside the table's calls (a
  // one-sided sample copying this process's shard: gearjax/sharded/
  // one_sided.py) holds the table while it reads, so that Close waits for it
  // as for a sample inside and keeps the memory if it does not leave in
  // time. Hold returns false, holding nothing, once the table is closed;
  // each true Hold is ended by one Release.
  bool Hold();
  void Release();
  // Whether this process is a fork of the one that made the table (forks.h):
  // then every call but this one and closed() throws Closed.
  bool forked_copy() const { return fork_generation_ != forks::Generation(); }
  // Calls waiting on the rate limiter (or, constrained, for enough items)
  // now: the ones a Close would wake.
  int64_t waiting() const;

  // What this table, as a shard's owner, has served to the xla exchange.
  ExchangeCounters& exchange_counters() { return exchange_counters_; }

 private:
  // The GPU side works on the state below, under mu_ (table_gpu.h).
  friend class TableGpu;
  using Clock = std::chrono::steady_clock;

  // The mutex, to hold (MutexLock lock(CheckedMutex())); throws Closed
  // (forks.h) where this process is a fork of the one that made the table:
  // its holders may not have survived it.
  Mutex& CheckedMutex() const GEARJAX_RETURN_CAPABILITY(mu_) {
    if (fork_generation_ != forks::Generation()) [[unlikely]] ThrowForkedCopy();
    return mu_;
  }
  [[noreturn]] void ThrowForkedCopy() const;
  void CheckOpenLocked() const GEARJAX_REQUIRES(mu_);
  LimiterState LimiterStateLocked() const GEARJAX_REQUIRES(mu_);
  // Waits until the limiter admits the request (or throws Timeout/Closed).
  void WaitToSampleLocked(MutexLock& lock, const SampleRequest& request) GEARJAX_REQUIRES(mu_);
  // The limiter's wait, for samples and inserts: until `ready()` (called
  // with mu_ held) or the table closes, mu_ released meanwhile, within the
  // limiter's timeout, giving way to signals (interrupts.h; `what` names the
  // call held back) and counted in waiting(). Returns false on the timeout;
  // throws Closed if the table closed meanwhile.
  bool WaitWithinLimiterTimeoutLocked(MutexLock& lock, const std::function<bool()>& ready,
                                      const std::string& what) GEARJAX_REQUIRES(mu_);
  // The selector a sample's strategy (and alpha) draws from, made by the
  // strategy registry's factory and filled on first use (selector_set.h).
  SamplingSelector& SamplingSelectorLocked(const SampleRequest& request) GEARJAX_REQUIRES(mu_) {
    return SamplingSelectorLocked(request.strategy, request.alpha);
  }
  SamplingSelector& SamplingSelectorLocked(Strategy strategy, double alpha) GEARJAX_REQUIRES(mu_);
  // The same as its own type S, for the strategies the table names as
  // optimisations (docs/internals.md): Timestep's tree for cut="full" and
  // the GPU mirrors.
  template <typename S>
  S& SamplingSelectorLocked(Strategy strategy, double alpha = 0.0) GEARJAX_REQUIRES(mu_) {
    return static_cast<S&>(SamplingSelectorLocked(strategy, alpha));
  }
  // The length index cut="full" samples normalise by, made on first use.
  LengthIndex& LengthIndexLocked() GEARJAX_REQUIRES(mu_);
  // The items listed by length (what a cut="full" Prioritized sample visits
  // the short items by), made on first use.
  LengthBuckets& LengthBucketsLocked() GEARJAX_REQUIRES(mu_);
  // What the registry's factories make selectors from.
  SelectorContext SelectorContextLocked() const GEARJAX_REQUIRES(mu_);
  // cut="full" with replacement by Uniform, Timestep or Prioritized, without
  // listing the table (table_full_draws.cc): rows drawn from the strategy's
  // selector and kept when their window fits (Timestep: with probability
  // (L - w + 1) / L), normalised by the LengthIndex (Prioritized: by its
  // tree's total less the weight of the items too short, visited through
  // the LengthBuckets; where no item is too short, the plain draw). Returns
  // false, having drawn nothing that counts, where that is not worth it or
  // not possible (no eligible item, few eligible or little of the weight
  // eligible, or a row that keeps missing); the listing path then serves the
  // sample.
  bool SelectFullLocked(const SampleRequest& request, const uint32_t seed[2], const double* u,
                        Selection* out) GEARJAX_REQUIRES(mu_);
  bool SelectFullPrioritizedLocked(const SampleRequest& request, const uint32_t seed[2],
                                   const double* u, int64_t eligible, Selection* out)
      GEARJAX_REQUIRES(mu_);
  void AttachLocked(Selector* selector) GEARJAX_REQUIRES(mu_);
  void SelectLocked(const SampleRequest& request, const uint32_t seed[2], const double* u,
                    Selection* out) GEARJAX_REQUIRES(mu_);
  // Select's steps: cut="full" with replacement drawn without listing the
  // table, where the strategy can (returns false where not: nothing drawn);
  // a constrained request's draw from the listed candidates (waiting for
  // enough of them, as the limiter allows); the draws made from the rows
  // selected.
  bool SelectFastFullLocked(const SampleRequest& request, const uint32_t seed[2], const double* u,
                            Selection* out) GEARJAX_REQUIRES(mu_);
  void SelectConstrainedLocked(MutexLock& lock, const SampleRequest& request,
                               const Words4* words, double* u, Selection* out)
      GEARJAX_REQUIRES(mu_);
  void FillDrawsLocked(const SampleRequest& request, const Words4* words,
                       const Selection* selections, Draw* draws) const GEARJAX_REQUIRES(mu_);
  // Constrained requests: lists the eligible items in candidates_ and
  // returns how many rows they can serve (up to request.batch).
  int64_t CandidatesLocked(const SampleRequest& request) GEARJAX_REQUIRES(mu_);
  std::string ShortfallLocked(const SampleRequest& request, int64_t servable) const
      GEARJAX_REQUIRES(mu_);
  // Counts a draw of `slot` against max_times_sampled; removes the item when
  // it reaches it (`ticket`: the drawing sample's).
  void CountDrawLocked(int64_t slot, uint64_t ticket) GEARJAX_REQUIRES(mu_);
  // changed_.wait_until in slices of at most 1 ms: EndSample
  // notifies without the table's mutex, so a waiter for tickets may miss one
  // notification and would otherwise sleep to its deadline. While tickets are
  // on the device, which notifies nobody, in slices of 50 us: the waiter
  // reads the completion ring that often.
  template <typename TimePoint, typename Predicate>
  bool WaitForTickets(std::unique_lock<std::mutex>& lock, TimePoint deadline, Predicate done) {
    while (!done()) {
      const auto now = Clock::now();
      if (now >= deadline) return false;
      const auto slice_end =
          now + (tickets_.has_on_device() ? std::chrono::microseconds(50)
                                          : std::chrono::microseconds(1000));
      if (deadline < slice_end) {
        changed_.wait_until(lock, deadline);
      } else {
        changed_.wait_until(lock, slice_end);
      }
    }
    return true;
  }
  // a sample, reader or writer is inside the table
  bool InsideLocked() const GEARJAX_REQUIRES(mu_);
  // Every reader and writer of the records' priorities, the Prioritized
  // trees or the selectors filled from them calls this first, under mu_
  // (except a publish: PublishLocked defers its leaves instead): waits (mu_
  // released meanwhile, so state read before may be stale) until no GPU
  // priority update is in flight, keeping new ones from starting meanwhile;
  // while the caller keeps mu_, none starts. Then sets the deferred leaves
  // (SettledPrioritiesLocked). Returns whether it waited. Nothing to do for
  // tables never updated on the GPU (and tables without a Prioritized tree
  // never are: TableGpu::BeginUpdate stages theirs). Throws Closed if the table
  // closed meanwhile, Timeout if the update has not reported within
  // slot_wait_seconds (the priorities then untouched).
  bool OwnPrioritiesLocked() GEARJAX_REQUIRES(mu_);
  // Whether no GPU priority update may still run (forgetting the last one
  // if so); if none, sets the Prioritized leaves deferred meanwhile, from
  // their records, on the host (the ledger's deferred leaves). Never waits.
  bool SettledPrioritiesLocked() GEARJAX_REQUIRES(mu_);
  // The deferred leaves' slots whose record now holds a positive priority:
  // counted by PositiveLocked, not yet drawable from the trees.
  int64_t DeferredPositiveLocked() const GEARJAX_REQUIRES(mu_);
  // When a wait for GPU work begun now gives up (TableSpec::slot_wait_seconds
  // from now), and the Timeout it then throws, naming `what` it waited for.
  Clock::time_point GpuWaitDeadline() const;
  [[noreturn]] void ThrowGpuWaitTimeout(const std::string& what) const;
  // Live items with priority > 0: the host's count and the GPU updates'.
  int64_t PositiveLocked() const GEARJAX_REQUIRES(mu_);
  // Takes the next sample ticket; with a completion ring, then waits until
  // no earlier ticket in flight shares its place (gpu_completions.h). Throws
  // Timeout at slot_wait_seconds, the ticket given back. For GPU updates,
  // which look at the table again after a wait.
  uint64_t TakeTicketLocked(MutexLock& lock) GEARJAX_REQUIRES(mu_);
  // Whether the next ticket may be taken without waiting: no completion
  // ring, or no earlier ticket in flight in its place.
  bool TicketPlaceFreeLocked() GEARJAX_REQUIRES(mu_);
  // Waits, holding no ticket and letting go of the lock, until
  // TicketPlaceFreeLocked or the table is closed; throws Timeout at
  // `deadline` (a GPU stream that does not progress), having changed nothing.
  // A sample waits here before it draws again: it takes its ticket in the
  // hold of the lock it drew in, never across a wait (a ticket held while
  // waiting for the rate limiter or for inserts would hold back the inserts
  // that reuse slots).
  void WaitForTicketPlaceLocked(MutexLock& lock, Clock::time_point deadline)
      GEARJAX_REQUIRES(mu_);
  // The deadline a wait for a ticket's place keeps to (slot_wait_seconds).
  Clock::time_point TicketPlaceDeadline() const;
  // A sample's draw: waits for the rate limiter (WaitToSampleLocked), then
  // draws (draw(), under mu_), until the next ticket's place is free; between
  // tries it waits for that place (WaitForTicketPlaceLocked). Returns with
  // the lock held, so the caller takes its ticket in the hold of the lock its
  // rows were drawn in (Select, TableGpu::BeginSample).
  template <typename DrawRows>
  void DrawForTicketLocked(MutexLock& lock, const SampleRequest& r, DrawRows draw)
      GEARJAX_REQUIRES(mu_) {
    const Clock::time_point deadline = TicketPlaceDeadline();
    for (;;) {
      WaitToSampleLocked(lock, r);
      draw();
      if (TicketPlaceFreeLocked()) return;
      WaitForTicketPlaceLocked(lock, deadline);
    }
  }
  // ~Table: waits for the GPU samples still reading the table's memory.
  void WaitForDeviceTickets();
  int64_t AcquireSlotLocked(MutexLock& lock, bool* evicted) GEARJAX_REQUIRES(mu_);
  // An insert's slot: waits on the limiter (not for restores,
  // restore_slot >= 0), takes a slot (evicting by the remover), and waits for
  // the samples and readers still reading it. The slot is then kWriting and
  // counted in writers_; AbandonLocked or PublishReservedLocked ends that.
  int64_t ReserveLocked(MutexLock& lock, int64_t restore_slot) GEARJAX_REQUIRES(mu_);
  // ReserveLocked's steps: refuses an insert that no key or insertion stamp
  // is left for; waits until the limiter admits an insert (Timeout, Closed);
  // waits until the samples and readers that may still read `slot` are done
  // (Timeout, Closed: the slot then abandoned).
  void CheckKeysLeftLocked(int64_t n = 1) const GEARJAX_REQUIRES(mu_);
  void WaitToInsertLocked(MutexLock& lock) GEARJAX_REQUIRES(mu_);
  void WaitForSlotReadersLocked(MutexLock& lock, int64_t slot, bool evicted, bool restoring)
      GEARJAX_REQUIRES(mu_);
  void AbandonLocked(int64_t slot, bool restoring) GEARJAX_REQUIRES(mu_);
  // `steps`: the slot's step priorities (a table that keeps them), or null:
  // every step `priority`.
  int64_t PublishReservedLocked(int64_t slot, int64_t length, double priority,
                                int64_t restore_key, int64_t restore_stamp,
                                const double* steps = nullptr) GEARJAX_REQUIRES(mu_);
  Item ItemLocked(int64_t slot) const GEARJAX_REQUIRES(mu_);
  std::vector<ItemInfo> PinItemsLocked(const int64_t* keys, int64_t count) GEARJAX_REQUIRES(mu_);
  // The step priorities of `items` back to back (a table that keeps them).
  std::vector<double> StepPrioritiesLocked(const std::vector<ItemInfo>& items) const
      GEARJAX_REQUIRES(mu_);
  // Tells a selector just made every live item, oldest first (before it is
  // kept: a throw leaves the table as it was).
  void FillLocked(Selector& selector) const GEARJAX_REQUIRES(mu_);
  void EvictLocked(int64_t slot) GEARJAX_REQUIRES(mu_);
  void RemoveFromSelectorsLocked(int64_t slot) GEARJAX_REQUIRES(mu_);
  // of its live trajectory's steps
  double LargestStepPriorityLocked(int64_t slot) const GEARJAX_REQUIRES(mu_);
  // UpdateStepPriorities' rows that name a live key, in order: the row, its
  // slot, whether a named step held the trajectory's largest before the
  // call, and where the row's written leaves end in the call's list of them.
  struct StepRow {
    int64_t row;
    int64_t slot;
    bool held_largest;
    int64_t leaves_end;
    double largest_written = 0.0;  // SettleLargestStepsLocked's
  };
  // Checks every named step of a live key lies within its trajectory
  // (InvalidArgument otherwise, before anything is written).
  std::vector<StepRow> NamedStepRowsLocked(const int64_t* keys, const int64_t* steps,
                                           int64_t rows, int64_t width) const GEARJAX_REQUIRES(mu_);
  // An update's scratch, made before it writes anything (so one too large for
  // memory, std::bad_alloc, changes nothing): update_before_/after_ emptied
  // with room for `items`, each priority selector's for `items`, and each
  // step selector's for `steps` step leaves.
  void ReserveUpdateLocked(int64_t items, int64_t steps) GEARJAX_REQUIRES(mu_);
  // After the writes: each trajectory's own priority, the largest of its
  // steps', and the other priority selectors told. `order` is scratch of
  // named.size() entries, made before the writes (so is all else it needs:
  // UpdateStepPriorities).
  void SettleLargestStepsLocked(std::vector<StepRow>& named, const std::vector<int64_t>& leaves,
                                std::vector<size_t>& order) GEARJAX_REQUIRES(mu_);
  void PublishLocked(int64_t slot, int64_t key, int64_t length, double priority,
                     const double* steps, int64_t stamp) GEARJAX_REQUIRES(mu_);
  // The trees GPU kernels may draw from: Timestep's, then each Prioritized.
  std::vector<const SumTree*> DrawTreesLocked() const GEARJAX_REQUIRES(mu_);
  // Staging lists replaced by larger ones (GpuStaging::Retired): the caller
  // frees them only after releasing mu_ (declare the list before the lock).
  using RetiredStaging = std::vector<std::shared_ptr<void>>;
  // Moves the table's memory (arena, slots, selectors) out, for Close to free
  // once it has released the mutex; the arena left behind is empty.
  std::vector<std::shared_ptr<void>> TakeMemoryLocked() GEARJAX_REQUIRES(mu_);

  TableSpec spec_;
  ColumnLayout layout_;
  KeyLayout key_layout_;
  RateLimiter limiter_ GEARJAX_GUARDED_BY(mu_);
  Clock::time_point created_at_;

  mutable Mutex mu_;
  const uint64_t fork_generation_ = forks::Generation();  // when the table was made
  std::condition_variable changed_;  // any publish, release, eviction or close
  // Set under mu_; atomic so that closed() needs no lock (the writer's
  // per-step fast path asks it).
  std::atomic<bool> closed_{false};
  bool released_ GEARJAX_GUARDED_BY(mu_) = false;
  int64_t waiting_ GEARJAX_GUARDED_BY(mu_) = 0;  // see waiting()

  // Which hooks made the memory (TableGpu::CheckReachable, CheckDevice): fixed at
  // construction, so the checks need no lock while Close swaps the arena.
  const MappedAllocator* mapped_by_ = nullptr;  // arena (host) and selection state
  const DeviceMemory* device_memory_ = nullptr;  // a device arena
  int device_ordinal_ = -1;

  // Memory, released at close (see TakeMemoryLocked).
  // Not GEARJAX_GUARDED_BY(mu_): swapped under mu_ by Close, read without it
  // by callers inside the table (a writer's reserved slot, a sample's
  // ticket, a pinned slot), which Close waits for before taking the memory.
  std::unique_ptr<Arena> arena_;
  std::unique_ptr<Slots> slots_ GEARJAX_GUARDED_BY(mu_);
  // per slot: the insertion stamp of its item
  std::vector<int64_t> stamps_ GEARJAX_GUARDED_BY(mu_);
  // per slot: draws of its item (max_times_sampled)
  std::vector<int64_t> times_sampled_ GEARJAX_GUARDED_BY(mu_);
  // per slot: the ticket of the sample that removed it
  std::vector<uint64_t> freed_at_ GEARJAX_GUARDED_BY(mu_);
  int64_t last_stamp_ GEARJAX_GUARDED_BY(mu_) = -1;
  // Every selector (selector_set.h): the insertion order and Uniform
  // always, the remover's heap when the remover is min-priority, the others
  // when a sample first asks for them. The set owns them; the pointers name
  // the three no strategy draws from (null until made, and after Close).
  SelectorSet selectors_ GEARJAX_GUARDED_BY(mu_);
  InsertionOrder* order_ GEARJAX_GUARDED_BY(mu_) = nullptr;
  MinPriorityHeap* min_heap_ GEARJAX_GUARDED_BY(mu_) = nullptr;
  LengthIndex* lengths_ GEARJAX_GUARDED_BY(mu_) = nullptr;
  LengthBuckets* length_buckets_ GEARJAX_GUARDED_BY(mu_) = nullptr;
  // Step priorities (TableSpec::step_priorities; else empty): max_length a
  // slot, those past a trajectory's length unused.
  std::vector<double> step_priority_ GEARJAX_GUARDED_BY(mu_);

  int64_t live_ GEARJAX_GUARDED_BY(mu_) = 0;
  int64_t writers_ GEARJAX_GUARDED_BY(mu_) = 0;
  int64_t holders_ GEARJAX_GUARDED_BY(mu_) = 0;  // Hold without Release
  int64_t num_steps_ GEARJAX_GUARDED_BY(mu_) = 0;
  // live items with priority > 0, as the host changed them
  int64_t positive_ GEARJAX_GUARDED_BY(mu_) = 0;
  // Samples in flight: taken under mu_, returned by EndSample without it (it
  // runs in GPU stream callbacks, which must not wait behind the table's).
  mutable SampleTickets tickets_;
  // Made by TableGpu::UseCompletions (under mu_; read without it once made).
  std::unique_ptr<GpuCompletions> completions_owner_ GEARJAX_GUARDED_BY(mu_);
  std::atomic<GpuCompletions*> completions_{nullptr};
  std::atomic<int64_t> staged_updates_{0};
  // GPU priority updates (TableGpu::BeginUpdate, gpu/gpu_updates.h): the kernels'
  // report (made under mu_, read without it once made), and the ledger: the
  // last update's ticket and stream, the callers of OwnPrioritiesLocked
  // waiting for it, and the deferred leaves, slots published while an update
  // may run whose Prioritized leaves (and their ancestors) are yet to be set
  // from their records (an insert never waits for the GPU to publish). Their
  // records are live; eviction and every other writer wait for the update
  // (OwnPrioritiesLocked), which sets them first. The next update kernel sets
  // them (TableGpu::HandDeferredLeavesLocked), or the host once none may run
  // (SettledPrioritiesLocked).
  GpuUpdateReportCell gpu_report_;
  GpuUpdateLedger gpu_updates_ GEARJAX_GUARDED_BY(mu_);
  // Staging lists and the last copy into the mirrors (TableGpu::StagingLocked).
  std::unique_ptr<GpuStaging> gpu_staging_ GEARJAX_GUARDED_BY(mu_);
  DeferredError deferred_;  // DeferError's, raised by RaiseDeferredError
  Counters counters_ GEARJAX_GUARDED_BY(mu_);
  ExchangeCounters exchange_counters_;  // its own lock: not under mu_
  int64_t skipped_updates_ GEARJAX_GUARDED_BY(mu_) = 0;
  std::vector<Item> update_before_ GEARJAX_GUARDED_BY(mu_);    // UpdatePriorities' scratch
  std::vector<double> update_after_ GEARJAX_GUARDED_BY(mu_);
  std::vector<Candidate> candidates_ GEARJAX_GUARDED_BY(mu_);  // constrained samples' scratch
  ConstrainedDraw constrained_ GEARJAX_GUARDED_BY(mu_);
};

// Throws InvalidArgument unless ValidPriority (limits.h); `what` names the
// value.
void CheckPriority(double priority, const std::string& what);

}  // namespace gearjax
