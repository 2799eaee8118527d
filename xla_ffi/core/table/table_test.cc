// Tests of the composed table: the slot lifecycle, removers, selection per
// strategy, priority updates by key, the numeric contract, lazily created
// selectors, and closing (memory released once nothing is inside).
#include "core/table/table.h"
#include "core/table/table_gpu.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "core/gpu/gpu_completions.h"
#include "core/limits.h"
#include "core/memory.h"

namespace gearjax {
namespace {

using namespace std::chrono_literals;

TableSpec Spec(int64_t capacity, Remover remover = Remover::kFifo) {
  TableSpec spec;
  spec.name = "test";
  spec.columns.push_back({"x", 4, std::vector<uint8_t>(4, 0)});
  spec.capacity = capacity;
  spec.max_length = 8;
  spec.remover = remover;
  return spec;
}

// Inserts a trajectory of `length` steps whose values are all `value`.
int64_t Put(Table& table, int64_t length, double priority, int32_t value) {
  std::vector<int32_t> data(static_cast<size_t>(length), value);
  return table.Insert({data.data()}, length, priority);
}

std::vector<Draw> Sample(Table& table, Strategy strategy, int64_t batch, double alpha = 0,
                         int64_t count = 0, uint32_t seed0 = 1) {
  std::vector<Draw> draws(static_cast<size_t>(batch));
  const uint32_t seed[2] = {seed0, 2};
  table.EndSample(table.Select({strategy, alpha, count, batch, 0}, seed, draws.data()));
  return draws;
}

// Draws `batch` rows by Uniform and keeps the sample inside the table: its
// ticket, for EndSample.
uint64_t HoldSample(Table& table, int64_t batch, uint32_t seed0 = 1) {
  std::vector<Draw> draws(static_cast<size_t>(batch));
  const uint32_t seed[2] = {seed0, 2};
  return table.Select({Strategy::kUniform, 0, 0, batch, 0}, seed, draws.data());
}

std::set<int64_t> Keys(const std::vector<Draw>& draws) {
  std::set<int64_t> keys;
  for (const Draw& d : draws) keys.insert(d.key);
  return keys;
}

TEST(Table, KeysNameTheirSlotAndIncrease) {
  Table table(Spec(3));
  const int64_t a = Put(table, 2, 1, 0), b = Put(table, 2, 1, 1), c = Put(table, 2, 1, 2);
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
  const int64_t d = Put(table, 2, 1, 3);  // evicts a (FIFO) and takes its slot
  EXPECT_LT(c, d);
  EXPECT_EQ(table.key_layout().Slot(d), table.key_layout().Slot(a));
  EXPECT_EQ(table.key_layout().Sequence(d), 3);
  EXPECT_EQ(table.GetStats().counters.next_sequence, 4);
}

TEST(Table, RemoversEvictTheirVictims) {
  for (Remover remover : {Remover::kFifo, Remover::kLifo, Remover::kMinPriority}) {
    Table table(Spec(3, remover));
    const int64_t a = Put(table, 1, 5, 0), b = Put(table, 1, 1, 0), c = Put(table, 1, 9, 0);
    Put(table, 1, 3, 0);
    const std::vector<ItemInfo> items = table.PinItems();
    std::set<int64_t> left;
    std::vector<int64_t> slots;
    for (const ItemInfo& i : items) {
      left.insert(i.key);
      slots.push_back(i.slot);
    }
    table.UnpinSlots(slots);
    const int64_t evicted = remover == Remover::kFifo ? a : remover == Remover::kLifo ? c : b;
    EXPECT_EQ(left.count(evicted), 0u) << static_cast<int>(remover);
    EXPECT_EQ(left.size(), 3u);
  }
}

TEST(Table, UpdatesReachOnlyLiveKeysOfTheCurrentOccupant) {
  Table table(Spec(2));
  const int64_t a = Put(table, 1, 1, 0);
  Put(table, 1, 1, 0);
  const int64_t c = Put(table, 1, 1, 0);  // evicts a, reuses its slot
  const int64_t keys[] = {a, c, c, 12345};
  const double priorities[] = {7.0, 2.0, 3.0, 1.0};
  EXPECT_EQ(table.UpdatePriorities(keys, priorities, 4), 2);  // a is gone; c twice
  const int64_t wanted[] = {c};
  const std::vector<ItemInfo> items = table.PinItems(wanted, 1);
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0].priority, 3.0);  // the later duplicate won
  table.UnpinSlots({items[0].slot});
}

TEST(Table, PriorityContractIsCheckedBeforeAnythingChanges) {
  Table table(Spec(4));
  EXPECT_THROW(Put(table, 1, -1, 0), InvalidArgument);
  EXPECT_THROW(Put(table, 1, NAN, 0), InvalidArgument);
  EXPECT_THROW(Put(table, 1, INFINITY, 0), InvalidArgument);
  EXPECT_THROW(Put(table, 1, 1e31, 0), InvalidArgument);
  EXPECT_THROW(Put(table, 1, 4.9e-324, 0), InvalidArgument);  // subnormal
  const int64_t key = Put(table, 1, kMaxPriority, 0);
  EXPECT_EQ(table.GetStats().size, 1);
  const int64_t keys[] = {key, key};
  const double bad[] = {1.0, 5e-320};
  EXPECT_THROW(table.UpdatePriorities(keys, bad, 2), InvalidArgument);
  const std::vector<ItemInfo> items = table.PinItems();
  EXPECT_EQ(items[0].priority, kMaxPriority);  // the valid first entry was not applied
  table.UnpinSlots({items[0].slot});
}

TEST(Table, ExtremePrioritiesKeepProbabilitiesFinite) {
  Table table(Spec(4));
  Put(table, 1, kMaxPriority, 0);
  const int64_t small = Put(table, 1, kMinPriority, 1);
  for (const Draw& d : Sample(table, Strategy::kPrioritized, 64, kMaxAlpha)) {
    EXPECT_TRUE(std::isfinite(d.probability));
    EXPECT_GT(d.probability, 0.0f);
    EXPECT_NE(d.key, small);  // drawable in principle, improbable in practice
  }
}

TEST(Table, ZeroPriorityIsNeverDrawnAndAllZeroIsRefused) {
  Table table(Spec(4));
  const int64_t zero = Put(table, 1, 0, 0);
  EXPECT_THROW(Sample(table, Strategy::kPrioritized, 4, 1.0), InvalidArgument);
  EXPECT_TRUE(table.GetStats().alphas.empty());  // the refused sample took no place
  Put(table, 1, 2, 0);
  EXPECT_EQ(Keys(Sample(table, Strategy::kPrioritized, 64, 1.0)).count(zero), 0u);
  EXPECT_EQ(Keys(Sample(table, Strategy::kPrioritized, 64, 0.0)).count(zero), 1u);  // uniform
}

TEST(Table, AlphasTakeAPlaceOnlyWhenAdmittedAndAreBounded) {
  Table table(Spec(4));
  Put(table, 1, 1, 0);
  for (int i = 0; i < kMaxPriorityTrees; ++i) Sample(table, Strategy::kPrioritized, 1, 0.1 * i);
  Sample(table, Strategy::kPrioritized, 1, 0.0);  // an existing alpha: fine
  EXPECT_THROW(Sample(table, Strategy::kPrioritized, 1, 3.0), InvalidArgument);
  EXPECT_EQ(table.GetStats().alphas.size(), static_cast<size_t>(kMaxPriorityTrees));
  EXPECT_THROW(Sample(table, Strategy::kPrioritized, 1, kMaxAlpha * 2), InvalidArgument);
}

TEST(Table, LazySelectorsMatchWhatWasInsertedBeforeThem) {
  Table table(Spec(16));
  std::vector<int64_t> keys;
  for (int i = 0; i < 10; ++i) keys.push_back(Put(table, 1 + i % 8, 1 + i, i));
  // Created now, filled from the live items; then kept up to date.
  EXPECT_EQ(Keys(Sample(table, Strategy::kRecent, 200, 0, 2)),
            (std::set<int64_t>{keys[8], keys[9]}));
  EXPECT_EQ(Keys(Sample(table, Strategy::kTopK, 200, 0, 3)),
            (std::set<int64_t>{keys[7], keys[8], keys[9]}));
  const int64_t newest = Put(table, 1, 100, 0);
  EXPECT_EQ(Keys(Sample(table, Strategy::kTopK, 200, 0, 1)), (std::set<int64_t>{newest}));
  EXPECT_EQ(Keys(Sample(table, Strategy::kRecent, 200, 0, 1)), (std::set<int64_t>{newest}));
  // A count beyond the size means all of them, never out of range.
  EXPECT_EQ(Keys(Sample(table, Strategy::kRecent, 400, 0, int64_t{1} << 62)).size(), 11u);
}

TEST(Table, SameSeedSameStateSameDraws) {
  Table table(Spec(16));
  for (int i = 0; i < 12; ++i) Put(table, 1 + i % 8, 1 + i, i);
  for (Strategy s : {Strategy::kUniform, Strategy::kTimestep, Strategy::kPrioritized,
                     Strategy::kTopK, Strategy::kRecent}) {
    const std::vector<Draw> a = Sample(table, s, 32, 0.7, 5), b = Sample(table, s, 32, 0.7, 5);
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(a[i].slot, b[i].slot);
      ASSERT_EQ(a[i].start, b[i].start);
    }
  }
}

TEST(Table, AWriterWaitsForSamplesThatDrewItsVictimButNotForLaterOnes) {
  Table table(Spec(1));
  Put(table, 4, 1, 1);
  std::vector<Draw> draws(1);
  const uint32_t seed[2] = {0, 0};
  const uint64_t ticket = table.Select({Strategy::kUniform, 0, 0, 1, 0}, seed, draws.data());
  std::atomic<bool> done{false};
  std::thread writer([&] {
    Put(table, 4, 1, 2);
    done = true;
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(done.load()) << "the writer overwrote a slot a sample still reads";
  int32_t value;
  std::memcpy(&value, table.StepPointer(0, draws[0].slot, 0), 4);
  EXPECT_EQ(value, 1);
  table.EndSample(ticket);
  writer.join();
  EXPECT_TRUE(done.load());
  // A sample that began after an eviction never holds back that writer.
  Table two(Spec(2));
  Put(two, 1, 1, 1);
  Put(two, 1, 1, 2);
  const uint64_t early = two.Select({Strategy::kUniform, 0, 0, 1, 0}, seed, draws.data());
  std::atomic<bool> second{false};
  std::thread evictor([&] {
    Put(two, 1, 1, 3);  // evicts; waits for `early`
    second = true;
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(second.load());
  const uint64_t late = two.Select({Strategy::kUniform, 0, 0, 1, 0}, seed, draws.data());
  two.EndSample(early);
  evictor.join();  // `late` is still in flight: the writer did not wait for it
  EXPECT_TRUE(second.load());
  two.EndSample(late);
  EXPECT_EQ(two.GetStats().samples_in_flight, 0);
}

TEST(Table, CloseWaitsForSamplesInsideThenReleasesTheMemory) {
  Table table(Spec(4));
  Put(table, 2, 1, 0);
  const uint64_t ticket = HoldSample(table, 2);
  EXPECT_FALSE(table.Close(0.05));  // a sample is inside: nothing released yet
  EXPECT_GT(table.GetStats().bytes_reserved, 0);
  EXPECT_THROW(Put(table, 1, 1, 0), Closed);
  EXPECT_THROW(Sample(table, Strategy::kUniform, 1), Closed);
  std::thread finisher([&] {
    std::this_thread::sleep_for(50ms);
    table.EndSample(ticket);
  });
  EXPECT_TRUE(table.Close(10.0));
  finisher.join();
  const Stats stats = table.GetStats();
  EXPECT_EQ(stats.bytes_reserved, 0);
  EXPECT_EQ(stats.size, 0);
  EXPECT_THROW(table.PinItems(), Closed);
  EXPECT_THROW(table.UpdatePriorities(nullptr, nullptr, 0), Closed);
  EXPECT_TRUE(table.Close(0));  // idempotent
}

TEST(Table, CloseWaitsForAHolderAndHoldFailsOnceClosed) {
  Table table(Spec(4));
  Put(table, 2, 1, 0);
  ASSERT_TRUE(table.Hold());
  ASSERT_TRUE(table.Hold());
  EXPECT_FALSE(table.Close(0.05));  // holders read its memory: nothing released yet
  EXPECT_GT(table.GetStats().bytes_reserved, 0);
  EXPECT_FALSE(table.Hold());  // closed: a new reader holds nothing
  table.Release();
  std::thread finisher([&] {
    std::this_thread::sleep_for(50ms);
    table.Release();  // the last one out: the waiting Close goes on
  });
  const auto begin = std::chrono::steady_clock::now();
  EXPECT_TRUE(table.Close(10.0));
  EXPECT_LT(std::chrono::steady_clock::now() - begin, 5s);
  finisher.join();
  EXPECT_EQ(table.GetStats().bytes_reserved, 0);
  EXPECT_THROW(table.Release(), std::logic_error);  // no Hold left to end
}

TEST(Table, CloseWakesBlockedSamplersAndWriters) {
  TableSpec spec = Spec(2);
  spec.limiter = {2, 0, -INFINITY, INFINITY, 30};  // MinSize(2), 30 s timeout
  Table table(spec);
  Put(table, 1, 1, 0);
  EXPECT_EQ(table.waiting(), 0);
  std::atomic<int> woke{0};
  std::thread sampler([&] {
    try {
      Sample(table, Strategy::kUniform, 1);
    } catch (const Closed&) {
      ++woke;
    }
  });
  // waiting() counts the blocked sampler once it waits (polled: no fixed sleep).
  for (int i = 0; i < 500 && table.waiting() == 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(table.waiting(), 1);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(table.Close(5));
  sampler.join();
  EXPECT_EQ(woke.load(), 1);
  EXPECT_EQ(table.waiting(), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST(Table, RestoreChecksKeysSlotsAndCounters) {
  Table table(Spec(4));
  const KeyLayout& layout = table.key_layout();
  std::vector<int32_t> data(1, 0);
  EXPECT_THROW(table.Insert({data.data()}, 1, 1, layout.Key(0, 1), 2), InvalidArgument);
  EXPECT_EQ(table.Insert({data.data()}, 1, 1, layout.Key(5, 2), 2), layout.Key(5, 2));
  EXPECT_THROW(table.Insert({data.data()}, 1, 1, layout.Key(4, 1), 1), InvalidArgument);
  EXPECT_THROW(table.RestoreState({7, 1, -1.0, 0, 0}, {0, 1, 3}), InvalidArgument);
  EXPECT_THROW(table.RestoreState({7, 1, 0, 0, 0}, {0, 1}), InvalidArgument);
  EXPECT_THROW(table.RestoreState({3, 1, 0, 0, 0}, {0, 1, 3}), InvalidArgument);
  table.RestoreState({6, 1, 0, 0, 0}, {3, 1, 0});
  EXPECT_EQ(table.key_layout().Sequence(Put(table, 1, 1, 0)), 6);
  // The key space ends: a restored counter at its limit refuses the next insert.
  Table full(Spec(4));
  full.RestoreState({full.key_layout().max_sequence() + 1, 0, 0, 0, 0}, {3, 2, 1, 0});
  EXPECT_THROW(Put(full, 1, 1, 0), InvalidArgument);
}

TEST(Table, AnInsertGivesUpOnASlotASampleNeverReturnsAndTheNextWaitsToo) {
  TableSpec spec = Spec(1);
  spec.slot_wait_seconds = 0.05;
  Table table(spec);
  Put(table, 2, 1, 7);
  const uint64_t ticket = HoldSample(table, 1);
  // The sample never ends (a stalled stream): the evicting insert times out,
  // inserts nothing and leaves the slot owed to the sample.
  EXPECT_THROW(Put(table, 2, 1, 8), Timeout);
  EXPECT_EQ(table.GetStats().size, 0);
  EXPECT_EQ(table.GetStats().writers, 0);
  EXPECT_THROW(Put(table, 2, 1, 9), Timeout);  // from the free list: still waits
  table.EndSample(ticket);
  Put(table, 2, 1, 10);
  EXPECT_EQ(table.GetStats().size, 1);
}

TEST(Table, AnInsertWaitingForASlotWakesOnClose) {
  Table table(Spec(1));
  Put(table, 2, 1, 7);
  const uint64_t ticket = HoldSample(table, 1);
  std::thread writer([&] { EXPECT_THROW(Put(table, 2, 1, 8), Closed); });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(table.Close(0.0));  // the sample is still inside
  writer.join();                   // woken by the close, long before 60 s
  table.EndSample(ticket);
}

// InsertManyWith over `rows` trajectories whose steps all hold 100 + row;
// returns the keys, and how often the fill ran and for how many rows at most.
struct ManyResult {
  std::vector<int64_t> keys;
  int64_t inserted = 0, fills = 0, widest = 0;
};

ManyResult PutMany(Table& table, const std::vector<int64_t>& lengths, int64_t fail_at_fill = -1) {
  const int64_t n = static_cast<int64_t>(lengths.size());
  std::vector<double> priorities(static_cast<size_t>(n), 1.0);
  ManyResult r;
  r.keys.assign(static_cast<size_t>(n), -1);
  auto fill = [&](int64_t first, const int64_t* slots, int64_t count) {
    if (r.fills++ == fail_at_fill) throw std::runtime_error("copy failed");
    r.widest = std::max(r.widest, count);
    for (int64_t j = 0; j < count; ++j) {
      std::vector<int32_t> data(static_cast<size_t>(lengths[first + j]),
                                static_cast<int32_t>(100 + first + j));
      std::memcpy(table.arena_data() + table.StepOffset(0, slots[j], 0), data.data(),
                  data.size() * sizeof(int32_t));
    }
  };
  try {
    table.InsertManyWith(n, lengths.data(), priorities.data(), fill, r.keys.data(), &r.inserted);
  } catch (...) {
    r.keys.resize(static_cast<size_t>(r.inserted));
    throw;
  }
  return r;
}

TEST(Table, InsertManyFillsChunksOfHalfTheSlotsAndPublishesInOrder) {
  Table table(Spec(6));
  const ManyResult r = PutMany(table, {1, 2, 3, 4, 5, 6, 7, 8});  // 8 into 6 slots
  EXPECT_EQ(r.inserted, 8);
  EXPECT_EQ(r.fills, 3);  // chunks of 3, 3, 2
  EXPECT_EQ(r.widest, 3);
  for (size_t i = 1; i < r.keys.size(); ++i) EXPECT_LT(r.keys[i - 1], r.keys[i]);
  const std::vector<ItemInfo> items = table.PinItems();
  ASSERT_EQ(items.size(), 6u);  // FIFO evicted the first two
  for (size_t i = 0; i < items.size(); ++i) {
    EXPECT_EQ(items[i].key, r.keys[i + 2]);
    EXPECT_EQ(items[i].length, static_cast<int64_t>(i + 3));
    std::vector<int32_t> steps(static_cast<size_t>(items[i].length));
    table.ReadSteps(0, items[i].slot, items[i].length, steps.data());
    for (int32_t v : steps) EXPECT_EQ(v, static_cast<int32_t>(100 + i + 2));
  }
  std::vector<int64_t> slots;
  for (const ItemInfo& item : items) slots.push_back(item.slot);
  table.UnpinSlots(slots);
  EXPECT_EQ(table.GetStats().writers, 0);
}

TEST(Table, InsertManyChecksEveryRowFirst) {
  Table table(Spec(6));
  EXPECT_THROW(PutMany(table, {1, 2, 9}), InvalidArgument);  // max_length 8
  EXPECT_EQ(table.GetStats().size, 0);
  EXPECT_EQ(table.GetStats().counters.inserts, 0);
}

TEST(Table, InsertManyKeepsTheChunksBeforeAFailedCopyAndReturnsTheRest) {
  Table table(Spec(4));
  int64_t inserted = -1;
  try {
    PutMany(table, {1, 1, 1, 1, 1}, /*fail_at_fill=*/1);  // chunks of 2: the second fails
    ADD_FAILURE() << "the failed copy did not propagate";
  } catch (const std::runtime_error&) {
    inserted = table.GetStats().counters.inserts;
  }
  EXPECT_EQ(inserted, 2);
  EXPECT_EQ(table.GetStats().size, 2);
  EXPECT_EQ(table.GetStats().writers, 0);
  EXPECT_EQ(table.FreeSlots().size(), 2u);  // the failed chunk's slots are free again
}

TEST(Table, InsertManyPublishesWhatItReservedBeforeARateLimiterTimeout) {
  TableSpec spec = Spec(8);
  spec.limiter = {1, 1.0, -1.0, 3.0, 0.05};  // 3 inserts ahead of samples at most
  Table table(spec);
  std::vector<int64_t> lengths(6, 2);
  std::vector<double> priorities(6, 1.0);
  std::vector<int64_t> keys(6, -1);
  int64_t inserted = 0;
  auto fill = [&](int64_t, const int64_t*, int64_t) {};
  EXPECT_THROW(table.InsertManyWith(6, lengths.data(), priorities.data(), fill, keys.data(),
                                    &inserted),
               Timeout);
  EXPECT_EQ(inserted, 3);
  EXPECT_EQ(table.GetStats().size, 3);
  EXPECT_GE(keys[2], 0);
  EXPECT_EQ(table.GetStats().writers, 0);
}

TEST(Table, TicketsReturnedFromManyThreadsReleaseEveryWaitingWriter) {
  // EndSample hands tickets back without the table's mutex (as GPU stream
  // callbacks do); writers waiting for them must all get through, and the
  // table must end with nothing in flight.
  Table table(Spec(4));
  for (int i = 0; i < 4; ++i) Put(table, 2, 1, i);
  std::vector<uint64_t> tickets;
  for (uint32_t i = 0; i < 64; ++i) tickets.push_back(HoldSample(table, 4, i));
  std::vector<std::thread> writers;
  for (int i = 0; i < 4; ++i) writers.emplace_back([&, i] { Put(table, 2, 1, 100 + i); });
  std::vector<std::thread> returners;
  for (int t = 0; t < 4; ++t) {
    returners.emplace_back([&, t] {
      for (size_t i = static_cast<size_t>(t); i < tickets.size(); i += 4) {
        table.EndSample(tickets[i]);
      }
    });
  }
  for (auto& r : returners) r.join();
  for (auto& w : writers) w.join();
  EXPECT_EQ(table.GetStats().samples_in_flight, 0);
  EXPECT_EQ(table.GetStats().counters.inserts, 8);
  EXPECT_TRUE(table.Close(1.0));
}

// A sample handed to the device (the CUDA handlers' way) holds the table's
// memory until its kernel reports it in the completion ring: a table dropped
// meanwhile waits for the report before it frees anything.
TEST(Table, ATableDroppedWithASampleOnTheDeviceWaitsForItsReport) {
  auto table = std::make_unique<Table>(Spec(4));
  Put(*table, 3, 1.0, 7);
  TableGpu(*table).UseCompletions(nullptr, GpuCompletions::kEmulated);
  const uint64_t ticket = HoldSample(*table, 2);
  const CompletionView kernel = TableGpu(*table).CompletionFor(ticket, GpuCompletions::kEmulated);
  TableGpu(*table).HandToDevice(ticket);
  EXPECT_EQ(TableGpu(*table).TicketsOnDevice(), 1);
  std::atomic<bool> freed{false};
  std::thread dropper([&] {
    table.reset();
    freed = true;
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(freed) << "the table was freed under a kernel still reading it";
  CompleteBlock(kernel, 1);
  dropper.join();
  EXPECT_TRUE(freed);
}

// Inside a stream callback the report may be queued behind the callback: the
// table does not wait there, and keeps its memory (and the ring the kernel
// still writes) for the life of the process instead.
TEST(Table, ATableDroppedInAStreamCallbackKeepsItsMemoryForTheKernel) {
  auto table = std::make_unique<Table>(Spec(4));
  Put(*table, 3, 1.0, 7);
  TableGpu(*table).UseCompletions(nullptr, GpuCompletions::kEmulated);
  const uint64_t ticket = HoldSample(*table, 2);
  const CompletionView kernel = TableGpu(*table).CompletionFor(ticket, GpuCompletions::kEmulated);
  TableGpu(*table).HandToDevice(ticket);
  const auto started = std::chrono::steady_clock::now();
  {
    StreamCallbackScope callback;
    table.reset();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s);
  CompleteBlock(kernel, 1);  // the ring is still there to write
  EXPECT_EQ(kernel.done[ticket % kernel.size], ticket);
}

// A writer that needs a slot a device sample may read reads the ring for it
// (no one notifies it) and goes on soon after the report.
TEST(Table, AWriterGoesOnSoonAfterTheRingReportsTheSample) {
  Table table(Spec(2));
  Put(table, 2, 1.0, 1);
  Put(table, 2, 1.0, 2);  // full: the next insert evicts
  TableGpu(table).UseCompletions(nullptr, GpuCompletions::kEmulated);
  const uint64_t ticket = HoldSample(table, 2);
  const CompletionView kernel = TableGpu(table).CompletionFor(ticket, GpuCompletions::kEmulated);
  TableGpu(table).HandToDevice(ticket);
  std::atomic<bool> inserted{false};
  std::thread writer([&] {
    Put(table, 2, 1.0, 3);
    inserted = true;
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(inserted);
  const auto reported = std::chrono::steady_clock::now();
  CompleteBlock(kernel, 1);
  writer.join();
  // Polled every 50 us: far sooner than the 1 ms slices of returned tickets.
  EXPECT_LT(std::chrono::steady_clock::now() - reported, 500ms);
  EXPECT_EQ(TableGpu(table).TicketsOnDevice(), 0);
}

// A sample whose ticket's place in the completion ring is still held (by a
// sample on the device GpuCompletions::kSize tickets earlier: a stream far
// behind) waits for it, then fails with Timeout at slot_wait_seconds having
// changed nothing: nothing counted, no ticket kept. Once the place is free
// it draws.
TEST(Table, ASampleWaitingForItsTicketsPlaceFailsHavingChangedNothing) {
  TableSpec spec = Spec(4);
  spec.slot_wait_seconds = 0.05;
  Table table(spec);
  for (int32_t i = 0; i < 4; ++i) Put(table, 3, 1.0, i);
  TableGpu(table).UseCompletions(nullptr, GpuCompletions::kEmulated);
  const uint64_t held = HoldSample(table, 1);
  const CompletionView kernel = TableGpu(table).CompletionFor(held, GpuCompletions::kEmulated);
  TableGpu(table).HandToDevice(held);
  for (uint64_t i = 1; i < GpuCompletions::kSize; ++i) table.EndSample(HoldSample(table, 1));
  const Stats before = table.GetStats();
  EXPECT_THROW(HoldSample(table, 4), Timeout);
  const Stats after = table.GetStats();
  EXPECT_EQ(after.counters.samples, before.counters.samples);
  EXPECT_EQ(after.samples_in_flight, before.samples_in_flight);
  CompleteBlock(kernel, 1);
  table.EndSample(HoldSample(table, 4));
  EXPECT_EQ(table.GetStats().counters.samples, before.counters.samples + 4);
  EXPECT_EQ(table.GetStats().samples_in_flight, 0);
}

}  // namespace
}  // namespace gearjax
