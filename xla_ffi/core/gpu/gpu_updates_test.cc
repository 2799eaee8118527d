// Tests of what a table keeps of its GPU priority updates: the report made
// once in GPU-mapped memory (or not at all), its counts and refusals each
// taken once; the ledger's last update, claims and deferred leaves, and the
// leaves handed to a kernel: kept until its ticket ends, deferred again if
// it was never enqueued.
#include "core/gpu/gpu_updates.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "core/gpu/fake_pinned.h"

namespace gearjax {
namespace {

TEST(GpuUpdateReportCell, IsMadeOnceAndOnlyInGpuMappedMemory) {
  Mutex mu;  // the owner's mutex, as the table's
  MutexLock lock(mu);
  GpuUpdateReportCell cell;
  EXPECT_EQ(cell.get(), nullptr);
  EXPECT_FALSE(cell.Make(nullptr, mu));  // ordinary memory: no kernel could add to it
  EXPECT_EQ(cell.get(), nullptr);
  ASSERT_TRUE(cell.Make(&fake_pinned::kAllocator, mu));
  const GpuUpdateReport* made = cell.get();
  ASSERT_NE(made, nullptr);
  EXPECT_EQ(cell.device_data(mu), made);  // the fake maps memory at its own address
  EXPECT_TRUE(cell.Make(&fake_pinned::kAllocator, mu));
  EXPECT_EQ(cell.get(), made);  // not made again
}

TEST(GpuUpdateReportCell, CountsAreZeroUntilKernelsAdd) {
  Mutex mu;  // the owner's mutex, as the table's
  MutexLock lock(mu);
  GpuUpdateReportCell cell;
  EXPECT_EQ(cell.Counts().updated, 0u);
  EXPECT_EQ(cell.PositiveChange(), 0);
  ASSERT_TRUE(cell.Make(&fake_pinned::kAllocator, mu));
  GpuUpdateReport* report = cell.device_data(mu);
  report->updated = 5;
  report->skipped = 2;
  report->positive = static_cast<unsigned long long>(-3);  // kernels add negatives so
  const GpuUpdateReport counts = cell.Counts();
  EXPECT_EQ(counts.updated, 5u);
  EXPECT_EQ(counts.skipped, 2u);
  EXPECT_EQ(cell.PositiveChange(), -3);
}

TEST(GpuUpdateReportCell, EachRefusalIsTakenOnceWithTheFirstOnesDetails) {
  Mutex mu;  // the owner's mutex, as the table's
  MutexLock lock(mu);
  GpuUpdateReportCell cell;
  EXPECT_EQ(cell.TakeFailures().count, 0u);  // no report yet
  ASSERT_TRUE(cell.Make(&fake_pinned::kAllocator, mu));
  GpuUpdateReport* report = cell.device_data(mu);
  report->failed = 2;
  report->held = 1;
  report->bad_entry = 7;
  report->bad_value = -1.5;
  const GpuUpdateReportCell::Failures first = cell.TakeFailures();
  EXPECT_EQ(first.count, 2u);
  EXPECT_TRUE(first.detailed);
  EXPECT_EQ(first.entry, 7);
  EXPECT_EQ(first.value, -1.5);
  EXPECT_EQ(report->held, 0u);  // free for the next refusal's details
  EXPECT_EQ(cell.TakeFailures().count, 0u);
  report->failed = 3;  // one more, whose details a race lost
  const GpuUpdateReportCell::Failures next = cell.TakeFailures();
  EXPECT_EQ(next.count, 1u);
  EXPECT_FALSE(next.detailed);
}

TEST(GpuUpdateReportCell, ConcurrentTakersShareTheRefusalsWithoutCountingOneTwice) {
  Mutex mu;  // the owner's mutex, as the table's
  MutexLock lock(mu);
  GpuUpdateReportCell cell;
  ASSERT_TRUE(cell.Make(&fake_pinned::kAllocator, mu));
  GpuUpdateReport* report = cell.device_data(mu);
  std::vector<unsigned long long> taken(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) taken[t] += cell.TakeFailures().count;
    });
  }
  for (unsigned long long failed = 1; failed <= 500; ++failed) {
    __atomic_store_n(&report->failed, failed, __ATOMIC_RELEASE);
  }
  for (std::thread& thread : threads) thread.join();
  unsigned long long total = cell.TakeFailures().count;
  for (unsigned long long n : taken) total += n;
  EXPECT_EQ(total, 500u);
}

TEST(GpuUpdateLedger, KnowsTheLastUpdateAndItsStreamUntilItEnds) {
  SampleTickets tickets;
  GpuUpdateLedger ledger;
  const int stream_a = 0, stream_b = 0;
  EXPECT_FALSE(ledger.InFlight(tickets));
  EXPECT_EQ(ledger.last().ticket, 0u);
  const uint64_t first = tickets.Take();
  ledger.Record(first, &stream_a, tickets);
  EXPECT_EQ(ledger.last().ticket, first);
  EXPECT_EQ(ledger.last().stream, &stream_a);
  EXPECT_TRUE(ledger.InFlight(tickets));
  EXPECT_FALSE(ledger.OtherStreamInFlight(&stream_a, tickets));
  EXPECT_TRUE(ledger.OtherStreamInFlight(&stream_b, tickets));
  tickets.Return(first);
  EXPECT_FALSE(ledger.InFlight(tickets));
  EXPECT_FALSE(ledger.OtherStreamInFlight(&stream_b, tickets));
  ledger.Forget();
  EXPECT_EQ(ledger.last().ticket, 0u);
}

TEST(GpuUpdateLedger, AwaitsEachUpdatesEnqueueAndDropsOneNeverEnqueued) {
  SampleTickets tickets;
  GpuUpdateLedger ledger;
  const int stream = 0, other = 0;
  const uint64_t t1 = tickets.Take(), t2 = tickets.Take();
  ledger.Record(t1, &stream, tickets);
  EXPECT_TRUE(ledger.AwaitingEnqueue());
  ledger.Enqueued(t1);
  EXPECT_FALSE(ledger.AwaitingEnqueue());
  ledger.Record(t2, &stream, tickets);
  EXPECT_TRUE(ledger.AwaitingEnqueue());
  ledger.Drop(t2);  // not enqueued: forgotten, whatever other stream asks
  EXPECT_FALSE(ledger.AwaitingEnqueue());
  EXPECT_EQ(ledger.last().ticket, t1);
  tickets.Return(t2);
  EXPECT_TRUE(ledger.OtherStreamInFlight(&other, tickets));
  tickets.Return(t1);
  EXPECT_FALSE(ledger.InFlight(tickets));
}

// Two threads on one stream may enqueue their kernels out of ticket order
// (each launches after letting go of the table's lock): the later ticket can
// end first while the earlier kernel has yet to run, and the priorities are
// not settled until both have ended.
TEST(GpuUpdateLedger, AnEarlierUpdateStillRunningKeepsItInFlightWhenALaterOneEnded) {
  SampleTickets tickets;
  GpuUpdateLedger ledger;
  const int stream = 0, other = 0;
  const uint64_t t5 = tickets.Take(), t6 = tickets.Take();
  ledger.Record(t5, &stream, tickets);
  ledger.Record(t6, &stream, tickets);
  tickets.Return(t6);  // its kernel ran first
  EXPECT_TRUE(ledger.InFlight(tickets));
  EXPECT_TRUE(ledger.OtherStreamInFlight(&other, tickets));
  EXPECT_FALSE(ledger.OtherStreamInFlight(&stream, tickets));
  EXPECT_EQ(ledger.last().ticket, t6);
  tickets.Return(t5);
  EXPECT_FALSE(ledger.InFlight(tickets));
  // Recording forgets the updates that ended: the list holds what may run.
  const uint64_t t7 = tickets.Take();
  ledger.Record(t7, &other, tickets);
  EXPECT_EQ(ledger.last().ticket, t7);
  EXPECT_EQ(ledger.last().stream, &other);
  EXPECT_TRUE(ledger.OtherStreamInFlight(&stream, tickets));
  tickets.Return(t7);
  EXPECT_FALSE(ledger.InFlight(tickets));
  ledger.Forget();
  EXPECT_EQ(ledger.last().ticket, 0u);
}

TEST(GpuUpdateLedger, CountsClaimsAndKeepsDeferredLeavesInOrder) {
  GpuUpdateLedger ledger;
  EXPECT_FALSE(ledger.claimed());
  ledger.Claim();
  ledger.Claim();
  ledger.EndClaim();
  EXPECT_TRUE(ledger.claimed());
  ledger.EndClaim();
  EXPECT_FALSE(ledger.claimed());
  ledger.Defer(3);
  ledger.Defer(1);
  EXPECT_EQ(ledger.deferred(), (std::vector<int64_t>{3, 1}));
  ledger.ClearDeferred();
  EXPECT_TRUE(ledger.deferred().empty());
}

TEST(GpuUpdateLedger, LeavesHandedToAnUpdateNeverEnqueuedAreDeferredAgain) {
  SampleTickets tickets;
  GpuUpdateLedger ledger;
  const uint64_t t1 = tickets.Take();
  ledger.Defer(3);
  ledger.Defer(1);
  ledger.HandDeferred(t1, tickets);
  EXPECT_TRUE(ledger.deferred().empty());  // the kernel's now
  EXPECT_EQ(ledger.handed(), 2);
  ledger.Defer(5);  // published while the update may run
  ledger.TakeBack(t1);  // its kernel was never enqueued
  EXPECT_EQ(ledger.deferred(), (std::vector<int64_t>{3, 1, 5}));
  EXPECT_EQ(ledger.handed(), 0);
  ledger.TakeBack(t1);  // once only
  EXPECT_EQ(ledger.deferred(), (std::vector<int64_t>{3, 1, 5}));
}

TEST(GpuUpdateLedger, TakesBackOnlyTheLeavesOfTheUpdateNotEnqueued) {
  SampleTickets tickets;
  GpuUpdateLedger ledger;
  const uint64_t t1 = tickets.Take(), t2 = tickets.Take(), t3 = tickets.Take();
  ledger.HandDeferred(t1, tickets);  // nothing deferred: nothing kept
  EXPECT_EQ(ledger.handed(), 0);
  ledger.Defer(4);
  ledger.HandDeferred(t2, tickets);
  ledger.Defer(6);
  ledger.HandDeferred(t3, tickets);
  ledger.TakeBack(t3);
  EXPECT_EQ(ledger.deferred(), (std::vector<int64_t>{6}));  // t2's kernel sets slot 4
  EXPECT_EQ(ledger.handed(), 1);
}

TEST(GpuUpdateLedger, ForgetsHandedLeavesOnceTheirTicketHasEnded) {
  SampleTickets tickets;
  GpuUpdateLedger ledger;
  const uint64_t t1 = tickets.Take();
  ledger.Defer(2);
  ledger.HandDeferred(t1, tickets);
  tickets.Return(t1);  // its kernel ran and reported
  const uint64_t t2 = tickets.Take();
  ledger.Defer(7);
  ledger.HandDeferred(t2, tickets);
  EXPECT_EQ(ledger.handed(), 1);  // t1's forgotten, t2's kept
  ledger.TakeBack(t1);            // too late to matter: nothing comes back
  EXPECT_TRUE(ledger.deferred().empty());
}

}  // namespace
}  // namespace gearjax
