// Tests of the sample tickets: tickets increase, QuietSince sees exactly the
// samples that drew at or before a ticket, returns from other threads (in
// any order, with no table mutex) are all drained, and a ticket returned
// twice or never given changes nothing. Tickets handed to the device come back
// only when the GPU completion ring says so, never from a stale report, and a
// ticket is told which earlier ticket in flight shares its ring place.
#include "core/table/sample_tickets.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "core/gpu/gpu_completions.h"

namespace gearjax {
namespace {

TEST(SampleTickets, TicketsIncreaseFromOne) {
  SampleTickets t;
  EXPECT_EQ(t.last(), 0u);
  EXPECT_EQ(t.next(), 1u);
  EXPECT_EQ(t.Take(), 1u);
  EXPECT_EQ(t.Take(), 2u);
  EXPECT_EQ(t.last(), 2u);
  EXPECT_EQ(t.next(), 3u);
  EXPECT_EQ(t.in_flight(), 2);
}

TEST(SampleTickets, QuietSinceWaitsOnlyForSamplesThatDrewByThen) {
  SampleTickets t;
  EXPECT_TRUE(t.QuietSince(0));  // nothing in flight
  const uint64_t a = t.Take(), b = t.Take(), c = t.Take();
  EXPECT_FALSE(t.QuietSince(a));
  t.Return(b);  // returned out of order: a is still reading
  EXPECT_FALSE(t.QuietSince(a));
  EXPECT_FALSE(t.QuietSince(b));
  t.Return(a);
  EXPECT_TRUE(t.QuietSince(a));
  EXPECT_TRUE(t.QuietSince(b));
  EXPECT_FALSE(t.QuietSince(c));
  t.Return(c);
  EXPECT_TRUE(t.QuietSince(c));
  EXPECT_EQ(t.in_flight(), 0);
}

TEST(SampleTickets, UnknownAndRepeatedReturnsChangeNothing) {
  SampleTickets t;
  const uint64_t a = t.Take();
  t.Return(a + 100);  // never given
  EXPECT_EQ(t.in_flight(), 1);
  t.Return(a);
  t.Return(a);  // twice
  EXPECT_EQ(t.in_flight(), 0);
  EXPECT_EQ(t.Take(), a + 1);
}

TEST(SampleTickets, ReturnsFromManyThreadsAreAllDrained) {
  SampleTickets t;
  constexpr int kThreads = 8, kEach = 500;
  std::vector<uint64_t> tickets;
  for (int i = 0; i < kThreads * kEach; ++i) tickets.push_back(t.Take());
  std::vector<std::thread> threads;
  for (int k = 0; k < kThreads; ++k) {
    threads.emplace_back([&, k] {
      for (int i = kEach - 1; i >= 0; --i) t.Return(tickets[k * kEach + i]);
    });
  }
  // Draining while the returns arrive (as the table's mutex holder would).
  while (t.in_flight() > 0) std::this_thread::yield();
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(t.in_flight(), 0);
  EXPECT_TRUE(t.QuietSince(tickets.back()));
}

TEST(SampleTickets, ATicketOnTheDeviceComesBackWhenTheRingSaysSo) {
  GpuCompletions ring(GetMappedAllocator());
  SampleTickets tickets;
  tickets.SetCompletions(&ring);
  const uint64_t a = tickets.Take(), b = tickets.Take();
  tickets.HandToDevice(a);
  tickets.Return(b);
  EXPECT_EQ(tickets.in_flight(), 1);
  EXPECT_EQ(tickets.on_device(), 1);
  EXPECT_FALSE(tickets.QuietSince(a));
  CompleteBlock(ring.View(a, GpuCompletions::kEmulated), 1);
  EXPECT_TRUE(tickets.QuietSince(b));
  EXPECT_EQ(tickets.on_device(), 0);
  EXPECT_EQ(tickets.in_flight(), 0);
}

TEST(SampleTickets, AStaleReportInThePlaceIsNotThisTickets) {
  GpuCompletions ring(GetMappedAllocator());
  SampleTickets tickets;
  tickets.SetCompletions(&ring);
  const uint64_t first = tickets.Take();
  tickets.HandToDevice(first);
  CompleteBlock(ring.View(first, GpuCompletions::kEmulated), 1);
  EXPECT_EQ(tickets.in_flight(), 0);
  for (uint64_t i = 1; i < GpuCompletions::kSize; ++i) tickets.Return(tickets.Take());
  const uint64_t again = tickets.Take();
  ASSERT_EQ(again, first + GpuCompletions::kSize);
  tickets.HandToDevice(again);
  EXPECT_EQ(tickets.on_device(), 1);  // the place holds `first`, not `again`
  CompleteBlock(ring.View(again, GpuCompletions::kEmulated), 1);
  EXPECT_EQ(tickets.on_device(), 0);
}

TEST(SampleTickets, SharesPlaceWithNamesTheEarlierTicketStillInFlight) {
  SampleTickets tickets;
  constexpr uint64_t kRing = 8;
  const uint64_t first = tickets.Take();  // 1
  for (int i = 0; i < 7; ++i) tickets.Return(tickets.Take());
  const uint64_t ninth = tickets.Take();  // 9: place 1, like `first`
  EXPECT_EQ(tickets.SharesPlaceWith(ninth, kRing), first);
  EXPECT_EQ(tickets.SharesPlaceWith(first, kRing), 0u);  // nothing before it
  tickets.Return(first);
  EXPECT_EQ(tickets.SharesPlaceWith(ninth, kRing), 0u);
  for (int i = 0; i < 7; ++i) tickets.Return(tickets.Take());
  const uint64_t seventeenth = tickets.Take();  // place 1 again: 9 is still in flight
  EXPECT_EQ(tickets.SharesPlaceWith(seventeenth, kRing), ninth);
  EXPECT_EQ(tickets.SharesPlaceWith(seventeenth, 0), 0u);  // no ring
}

TEST(SampleTickets, ATicketHandedOverAndReturnedByHandIsBackOnce) {
  GpuCompletions ring(GetMappedAllocator());
  SampleTickets tickets;
  tickets.SetCompletions(&ring);
  const uint64_t a = tickets.Take();
  tickets.HandToDevice(a);
  tickets.Return(a);  // e.g. a handler that waited for its stream after all
  EXPECT_EQ(tickets.in_flight(), 0);
  EXPECT_EQ(tickets.on_device(), 0);
  CompleteBlock(ring.View(a, GpuCompletions::kEmulated), 1);  // a late report changes nothing
  EXPECT_EQ(tickets.in_flight(), 0);
}

}  // namespace
}  // namespace gearjax
