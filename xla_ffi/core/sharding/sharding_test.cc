// Tests of global sampling over shards: totals per strategy, the shard draw
// (in proportion to the shards' weights, never an empty shard), the summary
// checks, the owner's draws (global keys, sizes and probabilities, empty
// rows, counted samples) and keys of fewer than 63 bits. The shard draw is
// checked row for row against a scan from shard 0.
#include "core/sharding/sharding.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <random>
#include <vector>

#include "core/random.h"

namespace gearjax {
namespace {

TableSpec Spec(int64_t capacity, int key_bits = 63) {
  TableSpec spec;
  spec.name = "shard";
  spec.columns.push_back({"x", 4, std::vector<uint8_t>(4, 0)});
  spec.capacity = capacity;
  spec.max_length = 8;
  spec.key_bits = key_bits;
  return spec;
}

int64_t Put(Table& table, int64_t length, double priority) {
  std::vector<int32_t> data(static_cast<size_t>(length), 7);
  return table.Insert({data.data()}, length, priority);
}

std::vector<ShardSummary> Summaries(const std::vector<double>& weights) {
  std::vector<ShardSummary> s;
  for (size_t k = 0; k < weights.size(); ++k) {
    s.push_back({static_cast<double>(k), weights[k], weights[k], weights[k]});
  }
  return s;
}

TEST(Sharding, TotalsFollowTheStrategy) {
  Table table(Spec(8));
  Put(table, 3, 4.0);
  Put(table, 5, 0.0);
  const StrategyTotals uniform = table.Totals({Strategy::kUniform, 0, 0, 1, 0});
  EXPECT_EQ(uniform.size, 2);
  EXPECT_EQ(uniform.num_steps, 8);
  EXPECT_EQ(uniform.weight, 2.0);
  EXPECT_EQ(table.Totals({Strategy::kTimestep, 0, 0, 1, 0}).weight, 8.0);
  EXPECT_DOUBLE_EQ(table.Totals({Strategy::kPrioritized, 0.5, 0, 1, 0}).weight, 2.0);
  EXPECT_EQ(table.Totals({Strategy::kPrioritized, 0.0, 0, 1, 0}).weight, 2.0);  // uniform
  EXPECT_THROW(table.Totals({Strategy::kTopK, 0, 2, 1, 0}), InvalidArgument);
  EXPECT_EQ(table.GetStats().counters.samples, 0);  // totals count nothing
}

TEST(Sharding, AllZeroPrioritiesWeighNothingAndTakeNoAlphaPlace) {
  Table table(Spec(4));
  Put(table, 1, 0.0);
  EXPECT_EQ(table.Totals({Strategy::kPrioritized, 1.0, 0, 1, 0}).weight, 0.0);
  EXPECT_TRUE(table.GetStats().alphas.empty());
}

TEST(Sharding, ShardsAreDrawnInProportionToTheirWeight) {
  const std::vector<ShardSummary> s = Summaries({1.0, 3.0, 0.0, 4.0});
  const int64_t n = 80000;
  std::vector<int32_t> shard(n), rank(n), counts(4);
  const uint32_t seed[2] = {11, 12};
  PlanShards(s.data(), 4, seed, n, shard.data(), rank.data(), counts.data());
  EXPECT_EQ(counts[2], 0);  // weight 0: never drawn
  int64_t sum = 0;
  for (int k = 0; k < 4; ++k) sum += counts[k];
  EXPECT_EQ(sum, n);
  const double expected[] = {1.0 / 8, 3.0 / 8, 0.0, 4.0 / 8};
  for (int k = 0; k < 4; ++k) {
    const double sd = std::sqrt(n * expected[k] * (1 - expected[k]));
    EXPECT_NEAR(counts[k], n * expected[k], 5 * sd + 1e-9) << k;
  }
  std::vector<int32_t> again(n), rank_again(n), counts_again(4);
  PlanShards(s.data(), 4, seed, n, again.data(), rank_again.data(), counts_again.data());
  EXPECT_EQ(shard, again);  // a function of the seed and the summaries
}

// The shard draw as a scan from shard 0 makes it, one row at a time: the
// reference the searched draw must equal row for row.
int32_t ScannedShard(const std::vector<ShardSummary>& s, const uint32_t seed[2], int64_t b) {
  double total = 0;
  int64_t last = -1;
  for (size_t k = 0; k < s.size(); ++k) {
    total += s[k].weight;
    if (s[k].weight > 0) last = static_cast<int64_t>(k);
  }
  const Words4 w = RowWords(seed, b);
  const double target = UniformFromBits(w.w[0], w.w[1]) * total;
  int64_t k = 0;
  double cumulative = s[0].weight;
  while (k < last && !(target < cumulative)) cumulative += s[++k].weight;
  return static_cast<int32_t>(k);
}

TEST(Sharding, TheShardDrawIsTheScanFromShardZeroRowForRowAndRanksCountRowsBefore) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t shards = 1 + static_cast<int64_t>(rng() % 70);
    std::vector<double> w(static_cast<size_t>(shards));
    for (double& x : w) {
      const uint64_t r = rng() % 5;  // zeros, inside and at the end; weights over many binades
      x = r == 0 ? 0.0 : std::ldexp(1.0 + static_cast<double>(rng() % 1000) / 1000,
                                    static_cast<int>(rng() % 60) - 30);
    }
    w[rng() % w.size()] = 1.0;
    const std::vector<ShardSummary> s = Summaries(w);
    const uint32_t seed[2] = {static_cast<uint32_t>(trial), 77};
    const int64_t batch = 1 + static_cast<int64_t>(rng() % 700);  // across blocks of 256 rows
    std::vector<int32_t> shard(static_cast<size_t>(batch)), rank(shard.size()),
        counts(static_cast<size_t>(shards));
    PlanShards(s.data(), shards, seed, batch, shard.data(), rank.data(), counts.data());
    std::vector<int32_t> want_counts(static_cast<size_t>(shards));
    for (int64_t b = 0; b < batch; ++b) {
      ASSERT_EQ(shard[b], ScannedShard(s, seed, b)) << "trial " << trial << " row " << b;
      // Its rank: the rows before it drawn from the same shard.
      ASSERT_EQ(rank[b], want_counts[shard[b]]) << "trial " << trial << " row " << b;
      ++want_counts[shard[b]];
    }
    EXPECT_EQ(counts, want_counts);
  }
}

TEST(Sharding, NothingToDrawAndMisorderedSummariesAreRefused) {
  std::vector<int32_t> shard(4), rank(4), counts(2);
  const uint32_t seed[2] = {1, 2};
  const auto plan = [&](const std::vector<ShardSummary>& s) {
    PlanShards(s.data(), 2, seed, 4, shard.data(), rank.data(), counts.data());
  };
  EXPECT_THROW(plan(Summaries({0.0, 0.0})), InvalidArgument);
  std::vector<ShardSummary> twice = Summaries({1.0, 1.0});
  twice[1].shard = 0;  // one process's summary where every process's should be
  EXPECT_THROW(plan(twice), InvalidArgument);
  std::vector<ShardSummary> nan = Summaries({1.0, 1.0});
  nan[1].weight = NAN;
  EXPECT_THROW(plan(nan), InvalidArgument);
  EXPECT_THROW(CheckSummaries(nullptr, 0), InvalidArgument);
}

TEST(Sharding, TheOwnerDrawsWhatEachRequesterAskedWithGlobalKeysAndProbabilities) {
  const int shift = 62;  // two shards: one shard bit
  Table table(Spec(8, shift));
  const int64_t a = Put(table, 2, 1.0), b = Put(table, 4, 1.0);
  // This table is shard 1 of two; shard 0 holds six trajectories.
  std::vector<ShardSummary> s = {{0, 6, 6, 6}, {1, 2, 6, 2}};
  const uint32_t seeds[4] = {1, 2, 3, 4};
  const int32_t counts[2] = {3, 0};
  const int64_t block = 4;
  std::vector<Draw> draws(2 * block, Draw{-7, -7, 0, 0, 0, 0, 0.0f});
  const std::vector<uint64_t> tickets =
      ServeDraws(table, {Strategy::kUniform, 0, 0, 1, 2}, 1, shift, s.data(), 2, seeds, counts,
                 block, draws.data());
  EXPECT_EQ(tickets.size(), 1u);  // requester 1 asked for nothing: no Select
  for (int64_t i = 0; i < 3; ++i) {
    const Draw& d = draws[i];
    EXPECT_GE(d.slot, 0);
    EXPECT_EQ(d.key >> shift, 1);
    const int64_t local = d.key & ((int64_t{1} << shift) - 1);
    EXPECT_TRUE(local == a || local == b);
    EXPECT_EQ(d.table_size, 8);  // the global size
    EXPECT_FLOAT_EQ(d.probability, 1.0f / 8);  // (2/8 for the shard) * (1/2 inside it)
  }
  for (int64_t i = 3; i < 2 * block; ++i) EXPECT_EQ(draws[i].slot, -7);  // left as it was
  for (uint64_t t : tickets) table.EndSample(t);
  EXPECT_EQ(table.GetStats().counters.samples, 3);  // only the rows asked for count
  EXPECT_EQ(table.GetStats().samples_in_flight, 0);
}

TEST(Sharding, BadRequestsReturnTheTicketsTheyTook) {
  Table table(Spec(4, 62));
  Put(table, 1, 1.0);
  std::vector<ShardSummary> s = Summaries({1.0, 1.0});
  const uint32_t seeds[4] = {1, 2, 3, 4};
  const int32_t counts[2] = {1, 9};  // 9 > block
  std::vector<Draw> draws(8);
  EXPECT_THROW(ServeDraws(table, {Strategy::kUniform, 0, 0, 1, 0}, 1, 62, s.data(), 2, seeds,
                          counts, 4, draws.data()),
               InvalidArgument);
  EXPECT_EQ(table.GetStats().samples_in_flight, 0);
  EXPECT_THROW(ServeDraws(table, {Strategy::kUniform, 0, 0, 1, 0}, 2, 62, s.data(), 2, seeds,
                          counts, 4, draws.data()),
               InvalidArgument);  // shard 2 of two
}

TEST(Sharding, FewerKeyBitsBoundTheInserts) {
  Table table(Spec(4, 4));  // 2 slot bits, 2 sequence bits: four inserts
  for (int i = 0; i < 4; ++i) EXPECT_LT(Put(table, 1, 1.0), 16);
  EXPECT_THROW(Put(table, 1, 1.0), InvalidArgument);
  EXPECT_THROW(Table(Spec(4, 2)), InvalidArgument);   // no bit left to count inserts
  EXPECT_THROW(Table(Spec(4, 64)), InvalidArgument);  // keys are non-negative int64
}

TEST(Sharding, RemoteLayoutShowsTheStrategysTreeAndTheMemory) {
  Table table(Spec(8));
  Put(table, 3, 4.0);
  Put(table, 5, 1.0);
  const RemoteLayout uniform = table.Remote({Strategy::kUniform, 0, 0, 1, 0});
  EXPECT_EQ(uniform.arena, table.arena_data());
  EXPECT_EQ(SumTreeTotal(uniform.tree), 2.0);  // one per live slot
  EXPECT_GE(uniform.tree_nodes, static_cast<size_t>(uniform.tree.offsets[uniform.tree.levels - 1] + 1));
  EXPECT_EQ(uniform.slots[table.key_layout().Slot(0)].length, 3);
  const RemoteLayout steps = table.Remote({Strategy::kTimestep, 0, 0, 1, 0});
  EXPECT_EQ(SumTreeTotal(steps.tree), 8.0);
  const RemoteLayout prioritized = table.Remote({Strategy::kPrioritized, 1.0, 0, 1, 0});
  EXPECT_EQ(SumTreeTotal(prioritized.tree), 5.0);
  EXPECT_EQ(table.GetStats().alphas.size(), 1u);  // created like a sample would
  const RemoteLayout recent = table.Remote({Strategy::kRecent, 0, 2, 1, 0});
  EXPECT_EQ(recent.tree_nodes, 0u);  // readers rank the records and stamps
  EXPECT_GT(recent.stamps[table.key_layout().Slot(0)], 0);
}

TEST(Sharding, StampsIncreaseInKeyOrderAndFollowTheClock) {
  Table table(Spec(8));
  const auto before = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  for (int i = 0; i < 5; ++i) Put(table, 1, 1.0);
  const std::vector<ItemInfo> items = table.PinItems();
  for (size_t i = 0; i < items.size(); ++i) {
    EXPECT_GE(items[i].stamp, before);
    if (i > 0) {
      EXPECT_GT(items[i].stamp, items[i - 1].stamp);
    }
  }
  std::vector<int64_t> slots;
  for (const ItemInfo& it : items) slots.push_back(it.slot);
  table.UnpinSlots(slots);
}

TEST(Sharding, RestoredStampsMustIncreaseAndStayBelowTheBound) {
  Table table(Spec(4));
  int32_t x = 1;
  const KeyLayout& layout = table.key_layout();
  table.Insert({&x}, 1, 1.0, layout.Key(0, 0), 0, 100);
  EXPECT_THROW(table.Insert({&x}, 1, 1.0, layout.Key(1, 1), 1, 100), InvalidArgument);
  EXPECT_THROW(table.Insert({&x}, 1, 1.0, layout.Key(1, 1), 1, kMaxStamp), InvalidArgument);
  table.Insert({&x}, 1, 1.0, layout.Key(1, 1), 1, 101);
  EXPECT_EQ(table.PinItems()[1].stamp, 101);
  // A clock behind the last stamp (here: a restored one an hour ahead): new
  // stamps still increase, one past the last.
  Table ahead(Spec(4));
  const int64_t hour = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::system_clock::now().time_since_epoch() +
                           std::chrono::hours(1)).count();
  ahead.Insert({&x}, 1, 1.0, ahead.key_layout().Key(0, 0), 0, hour);
  Put(ahead, 1, 1.0);
  EXPECT_EQ(ahead.PinItems()[1].stamp, hour + 1);
  // A restored stamp at the very top leaves no stamp for a new insert: it
  // fails clearly instead of repeating a stamp.
  Table full(Spec(4));
  full.Insert({&x}, 1, 1.0, full.key_layout().Key(0, 0), 0, kMaxStamp - 1);
  EXPECT_THROW(Put(full, 1, 1.0), InvalidArgument);
}

TEST(Sharding, TopsListTheBestFirst) {
  Table table(Spec(8));
  Put(table, 1, 2.0);
  Put(table, 1, 5.0);
  Put(table, 1, 2.0);  // ties with the first: newer, so ranked above it
  std::vector<TopEntry> out(8, TopEntry{-1, -9});
  const StrategyTotals t = table.Tops({Strategy::kTopK, 0, 2, 1, 0}, out.data());
  EXPECT_EQ(t.size, 3);
  EXPECT_EQ(t.weight, 2.0);
  const std::vector<ItemInfo> items = table.PinItems();
  EXPECT_EQ(out[0].priority, 5.0);
  EXPECT_EQ(out[0].stamp, items[1].stamp);
  EXPECT_EQ(out[1].stamp, items[2].stamp);
  EXPECT_EQ(out[2].stamp, -9);  // not written
  table.Tops({Strategy::kRecent, 0, 5, 1, 0}, out.data());
  EXPECT_EQ(out[0].stamp, items[2].stamp);
  EXPECT_EQ(out[2].stamp, items[0].stamp);
  EXPECT_THROW(table.Tops({Strategy::kUniform, 0, 0, 1, 0}, out.data()), InvalidArgument);
}

TEST(Sharding, RankingCountsEachShardsShareOfTheGlobalBest) {
  // Shard 0: priorities 9, 1; shard 1: 5, 5 (stamps 20 > 10), 0.
  std::vector<TopEntry> entries = {{9, 1}, {1, 2}, {0, -1}, {5, 20}, {5, 10}, {0, 30}};
  std::vector<ShardSummary> s = Summaries({0, 0});
  RankShards(Strategy::kTopK, 3, entries.data(), 3, s.data(), 2);
  EXPECT_EQ(s[0].weight, 1.0);  // 9
  EXPECT_EQ(s[1].weight, 2.0);  // 5, 5
  RankShards(Strategy::kTopK, 100, entries.data(), 3, s.data(), 2);
  EXPECT_EQ(s[0].weight + s[1].weight, 5.0);  // all of them
  // Recent: by stamp (shard 1's list is not in stamp order: refused).
  EXPECT_THROW(RankShards(Strategy::kRecent, 2, entries.data(), 3, s.data(), 2), InvalidArgument);
  std::vector<TopEntry> recent = {{0, 7}, {0, 3}, {0, 6}, {0, 5}};
  RankShards(Strategy::kRecent, 2, recent.data(), 2, s.data(), 2);
  EXPECT_EQ(s[0].weight, 1.0);
  EXPECT_EQ(s[1].weight, 1.0);
  // Equal stamps on two shards: the higher shard counts as newer.
  std::vector<TopEntry> tie = {{0, 7}, {0, -1}, {0, 7}, {0, -1}};
  RankShards(Strategy::kRecent, 1, tie.data(), 2, s.data(), 2);
  EXPECT_EQ(s[1].weight, 1.0);
  // Malformed lists: an entry after padding, a bad priority, a bad stamp.
  for (std::vector<TopEntry> bad :
       {std::vector<TopEntry>{{0, -1}, {0, 5}, {0, -1}, {0, -1}},
        std::vector<TopEntry>{{std::nan(""), 5}, {0, -1}, {0, -1}, {0, -1}},
        std::vector<TopEntry>{{1, -5}, {0, -1}, {0, -1}, {0, -1}}}) {
    EXPECT_THROW(RankShards(Strategy::kTopK, 2, bad.data(), 2, s.data(), 2), InvalidArgument);
  }
  EXPECT_THROW(RankShards(Strategy::kUniform, 2, tie.data(), 2, s.data(), 2), InvalidArgument);
}

TEST(Sharding, ARankedOwnerDrawsAmongItsOwnShareOfTheBest) {
  const int shift = 62;
  Table table(Spec(8, shift));
  Put(table, 1, 1.0);
  const int64_t b = Put(table, 1, 8.0);
  Put(table, 1, 2.0);
  // Shard 1 (this table) holds 1 of the global top 4 (weights g = 3, 1).
  std::vector<ShardSummary> s = {{0, 5, 5, 3}, {1, 3, 3, 1}};
  const uint32_t seeds[4] = {5, 6, 7, 8};
  const int32_t counts[2] = {4, 0};
  std::vector<Draw> draws(8);
  const std::vector<uint64_t> tickets = ServeDraws(
      table, {Strategy::kTopK, 0, 99, 1, 0}, 1, shift, s.data(), 2, seeds, counts, 4, draws.data());
  for (int i = 0; i < 4; ++i) {
    const Draw& d = draws[i];
    EXPECT_EQ(d.key & ((int64_t{1} << shift) - 1), b);  // its best only
    EXPECT_FLOAT_EQ(d.probability, 1.0f / 4);             // 1 / K
    EXPECT_EQ(d.table_size, 8);
  }
  for (uint64_t t : tickets) table.EndSample(t);
}

TEST(Sharding, BestListsAndRankingInputsAreCheckedForSize) {
  EXPECT_EQ(TopsRequest(3, 5, 5 * kEntryWords, 64).count, 5);
  EXPECT_EQ(TopsRequest(4, 99, 8 * kEntryWords, 8).strategy, Strategy::kRecent);
  EXPECT_THROW(TopsRequest(3, 5, 4 * kEntryWords, 64), InvalidArgument);  // too short
  EXPECT_THROW(TopsRequest(0, 5, 5 * kEntryWords, 64), InvalidArgument);  // Uniform
  EXPECT_THROW(TopsRequest(3, 0, 0, 64), InvalidArgument);
  const RankShape shape = RankShapeOf(3 * kSummaryWords, 3 * 4 * kEntryWords);
  EXPECT_EQ(shape.shards, 3);
  EXPECT_EQ(shape.per_shard, 4);
  EXPECT_THROW(RankShapeOf(3 * kSummaryWords + 1, 12 * kEntryWords), InvalidArgument);
  EXPECT_THROW(RankShapeOf(3 * kSummaryWords, 12 * kEntryWords + 4), InvalidArgument);
  EXPECT_THROW(RankShapeOf(3 * kSummaryWords, 0), InvalidArgument);
}

TEST(Sharding, KeysTranslateBetweenAShardAndTheGlobalLayout) {
  const int shift = 61;  // two shard bits
  const int64_t low = (int64_t{1} << shift) - 1;
  const int64_t keys[] = {5, low, low + 1, -3};
  int64_t global[4];
  TranslateKeys(keys, global, 4, 2, shift, /*to_local=*/false);
  EXPECT_EQ(global[0], (int64_t{2} << shift) | 5);
  EXPECT_EQ(global[1], (int64_t{2} << shift) | low);
  EXPECT_EQ(global[2], -1);  // too wide for a shard key
  EXPECT_EQ(global[3], -1);
  int64_t back[4];
  TranslateKeys(global, back, 4, 2, shift, /*to_local=*/true);
  EXPECT_EQ(back[0], 5);
  EXPECT_EQ(back[1], low);
  const int64_t other[] = {(int64_t{1} << shift) | 5};  // shard 1's: not ours
  TranslateKeys(other, back, 1, 2, shift, /*to_local=*/true);
  EXPECT_EQ(back[0], -1);
  TranslateKeys(global, global, 2, 2, shift, /*to_local=*/true);  // in place
  EXPECT_EQ(global[0], 5);
}

}  // namespace
}  // namespace gearjax
