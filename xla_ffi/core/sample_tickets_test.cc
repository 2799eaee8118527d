// Tests of the sample tickets: tickets increase, QuietSince sees exactly the
// samples that drew at or before a ticket, returns from other threads (in
// any order, with no table mutex) are all drained, and a ticket returned
// twice or never given changes nothing.
#include "core/sample_tickets.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

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

}  // namespace
}  // namespace gearjax
