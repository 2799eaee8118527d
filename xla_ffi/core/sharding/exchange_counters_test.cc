// Tests of the exchange counters: totals, block histogram, refusals.
#include "core/sharding/exchange_counters.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <thread>
#include <vector>

#include "core/common.h"

namespace gearjax {
namespace {

TEST(ExchangeCounters, AddsRowsAndBytesAndCountsEachBlockSize) {
  ExchangeCounters c;
  c.Record(/*block=*/80, /*rows_asked=*/64, /*rows_sent=*/4 * 80, /*row_bytes=*/100);
  c.Record(80, 70, 4 * 80, 100);
  c.Record(100, 90, 4 * 100, 100);
  c.Record(/*block=*/0, 30, 30, 100);  // ragged: exactly the rows asked
  const ExchangeTotals t = c.Totals();
  EXPECT_EQ(t.serves, 4);
  EXPECT_EQ(t.rows_asked, 64 + 70 + 90 + 30);
  EXPECT_EQ(t.rows_sent, 4 * 80 * 2 + 4 * 100 + 30);
  EXPECT_EQ(t.bytes_asked, (64 + 70 + 90 + 30) * 100);
  EXPECT_EQ(t.bytes_sent, (4 * 80 * 2 + 4 * 100 + 30) * 100);
  EXPECT_EQ(t.serves_by_block, (std::map<int64_t, int64_t>{{0, 1}, {80, 2}, {100, 1}}));
}

TEST(ExchangeCounters, RefusesNegativeAndOverflowingCountsAndRecordsNothing) {
  ExchangeCounters c;
  c.Record(10, 5, 20, 8);
  constexpr int64_t kBig = std::numeric_limits<int64_t>::max();
  EXPECT_THROW(c.Record(-1, 5, 20, 8), InvalidArgument);
  EXPECT_THROW(c.Record(10, -5, 20, 8), InvalidArgument);
  EXPECT_THROW(c.Record(10, 5, 20, -8), InvalidArgument);
  EXPECT_THROW(c.Record(10, 21, 20, 8), InvalidArgument);  // more asked than sent
  EXPECT_THROW(c.Record(10, 5, kBig, 8), InvalidArgument);  // bytes overflow
  ExchangeTotals t = c.Totals();
  EXPECT_EQ(t.serves, 1);
  EXPECT_EQ(t.rows_asked, 5);
  EXPECT_EQ(t.bytes_sent, 20 * 8);
  EXPECT_EQ(t.serves_by_block, (std::map<int64_t, int64_t>{{10, 1}}));

  ExchangeCounters full;
  full.Record(1, 1, 1, kBig);  // exactly int64's largest byte count: fits
  EXPECT_THROW(full.Record(1, 1, 1, 1), InvalidArgument);  // the sum would pass it
  t = full.Totals();
  EXPECT_EQ(t.serves, 1);
  EXPECT_EQ(t.bytes_sent, kBig);
  EXPECT_EQ(t.serves_by_block, (std::map<int64_t, int64_t>{{1, 1}}));
}

TEST(ExchangeCounters, ConcurrentRecordsAllCount) {
  ExchangeCounters c;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&c, t] {
      for (int i = 0; i < 1000; ++i) c.Record(8 + t, 3, 2 * (8 + t), 4);
    });
  }
  for (auto& t : threads) t.join();
  const ExchangeTotals t = c.Totals();
  EXPECT_EQ(t.serves, 4000);
  EXPECT_EQ(t.rows_asked, 12000);
  EXPECT_EQ(t.rows_sent, 2 * 1000 * (8 + 9 + 10 + 11));
  for (int64_t block = 8; block < 12; ++block) EXPECT_EQ(t.serves_by_block.at(block), 1000);
}

}  // namespace
}  // namespace gearjax
