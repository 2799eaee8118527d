// Tests of the table's window cuts and constrained samples: cut="start",
// "end" and "full" windows, replace=False, and max_times_sampled (removal on
// the n-th draw, slots reused only after the sample that freed them ends), with
// the errors for batches the eligible items cannot serve.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "core/table/table.h"
#include "core/table/table_gpu.h"
#include "core/window.h"

namespace gearjax {
namespace {

using namespace std::chrono_literals;

TableSpec Spec(int64_t capacity, int64_t max_times_sampled = 0, double timeout = 0) {
  TableSpec spec;
  spec.name = "modes";
  spec.columns.push_back({"x", 4, std::vector<uint8_t>(4, 0)});
  spec.capacity = capacity;
  spec.max_length = 10;
  spec.max_times_sampled = max_times_sampled;
  spec.limiter.timeout_seconds = timeout;
  return spec;
}

int64_t Put(Table& table, int64_t length, double priority = 1.0) {
  std::vector<int32_t> data(static_cast<size_t>(length), 0);
  return table.Insert({data.data()}, length, priority);
}

SampleRequest Request(Strategy strategy, int64_t batch, int64_t window, Cut cut,
                      bool replace = true, int64_t count = 0, double alpha = 0) {
  SampleRequest r;
  r.strategy = strategy;
  r.alpha = alpha;
  r.count = count;
  r.batch = batch;
  r.window = window;
  r.cut = cut;
  r.replace = replace;
  return r;
}

std::vector<Draw> Sample(Table& table, const SampleRequest& r, uint32_t seed0 = 1) {
  std::vector<Draw> draws(static_cast<size_t>(r.batch));
  const uint32_t seed[2] = {seed0, 7};
  table.EndSample(table.Select(r, seed, draws.data()));
  return draws;
}

TEST(CutWindow, EachCutCoversItsRangeExactly) {
  const int64_t length = 6, window = 4;
  for (Cut cut : {Cut::kStart, Cut::kEnd, Cut::kFull}) {
    std::map<std::pair<int64_t, int64_t>, int> seen;
    for (uint32_t w = 0; w < 4000; ++w) {
      const WindowCut c = CutWindow(cut, length, window, w * 2654435761u, w);
      ASSERT_GE(c.start, 0);
      ASSERT_GE(c.valid, 1);
      ASSERT_LE(c.valid, window);
      ASSERT_LE(c.start + c.valid, length);
      ++seen[{c.start, c.valid}];
    }
    if (cut == Cut::kStart) {  // starts 0..5, cut at the end
      EXPECT_EQ(seen.size(), 6u);
      EXPECT_TRUE(seen.count({5, 1}) && seen.count({2, 4}) && seen.count({3, 3}));
    } else if (cut == Cut::kEnd) {  // ends 0..5, cut at the start
      EXPECT_EQ(seen.size(), 6u);
      EXPECT_TRUE(seen.count({0, 1}) && seen.count({0, 3}) && seen.count({2, 4}));
    } else {  // full windows only: starts 0..2
      EXPECT_EQ(seen.size(), 3u);
      for (const auto& [key, n] : seen) EXPECT_EQ(key.second, window);
    }
  }
  EXPECT_EQ(CutWindow(Cut::kEnd, 5, 0, 1, 2).valid, 5);  // window 0: whole trajectories
  EXPECT_EQ(CutWindow(Cut::kEnd, 0, 3, 1, 2).valid, 0);  // a raced empty record
}

TEST(TableModes, FullWindowsDrawOnlyLongEnoughTrajectories) {
  Table table(Spec(8));
  std::set<int64_t> long_keys;
  for (int64_t length : {2, 3, 5, 9, 10}) {
    const int64_t key = Put(table, length);
    if (length >= 5) long_keys.insert(key);
  }
  for (Strategy s : {Strategy::kUniform, Strategy::kTimestep, Strategy::kPrioritized}) {
    const std::vector<Draw> draws = Sample(table, Request(s, 300, 5, Cut::kFull, true, 0, 1.0));
    for (const Draw& d : draws) {
      ASSERT_TRUE(long_keys.count(d.key)) << static_cast<int>(s);
      EXPECT_EQ(d.valid, 5);
      EXPECT_LE(d.start + 5, d.length);
      // Uniform: 1/3; Timestep by full windows 1 + 5 + 6 = 12; equal priorities.
      const double expected = s == Strategy::kTimestep ? (d.length - 4) / 12.0 : 1.0 / 3.0;
      EXPECT_FLOAT_EQ(d.probability, static_cast<float>(expected));
      EXPECT_EQ(d.table_size, 5);
    }
  }
  // TopK and Recent rank the eligible ones: the newest eligible is the 10.
  for (const Draw& d : Sample(table, Request(Strategy::kRecent, 20, 5, Cut::kFull, true, 1))) {
    EXPECT_EQ(d.length, 10);
    EXPECT_FLOAT_EQ(d.probability, 1.0f);
  }
  for (const Draw& d : Sample(table, Request(Strategy::kTopK, 20, 5, Cut::kFull, true, 2))) {
    EXPECT_GE(d.length, 9);  // equal priorities: the two newest eligible
  }
}

// A shortfall that does not wait (no rate limiter) is a Timeout, as an empty
// table is: the kind gearjax.table_error calls "timeout".
TEST(TableModes, ShortfallsRaiseAndTakeNoTicket) {
  Table table(Spec(8));
  Put(table, 2);
  Put(table, 3);
  EXPECT_THROW(Sample(table, Request(Strategy::kUniform, 1, 4, Cut::kFull)), Timeout);
  EXPECT_THROW(Sample(table, Request(Strategy::kUniform, 3, 2, Cut::kStart, false)),
               Timeout);
  EXPECT_THROW(Sample(table, Request(Strategy::kRecent, 2, 2, Cut::kStart, false, 1)),
               Timeout);
  EXPECT_EQ(table.GetStats().samples_in_flight, 0);
  EXPECT_EQ(table.GetStats().counters.samples, 0);
  try {
    Sample(table, Request(Strategy::kUniform, 3, 3, Cut::kFull, false));
    FAIL();
  } catch (const Timeout& e) {
    EXPECT_NE(std::string(e.what()).find("at least window=3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("only 1 draws"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("does not wait"), std::string::npos) << e.what();
  }
}

TEST(TableModes, WithoutReplacementRowsAreDistinct) {
  Table table(Spec(8));
  for (int i = 0; i < 6; ++i) Put(table, 4, 1.0 + i);
  for (Strategy s : {Strategy::kUniform, Strategy::kTimestep, Strategy::kPrioritized,
                     Strategy::kTopK, Strategy::kRecent}) {
    for (uint32_t seed = 0; seed < 10; ++seed) {
      const std::vector<Draw> draws =
          Sample(table, Request(s, s == Strategy::kTopK || s == Strategy::kRecent ? 3 : 6, 2,
                                Cut::kStart, false, 3, 1.0),
                 seed);
      std::set<int64_t> keys;
      for (const Draw& d : draws) keys.insert(d.key);
      EXPECT_EQ(keys.size(), draws.size());
      EXPECT_FLOAT_EQ(draws.back().probability, 1.0f);  // the last candidate left
    }
  }
}

TEST(TableModes, MaxTimesSampledRemovesOnTheNthDrawAlsoWithinABatch) {
  Table table(Spec(4, /*max_times_sampled=*/2));
  const int64_t a = Put(table, 3), b = Put(table, 3);
  const std::vector<Draw> draws = Sample(table, Request(Strategy::kUniform, 4, 2, Cut::kStart));
  std::map<int64_t, int> per_key;
  for (const Draw& d : draws) ++per_key[d.key];
  EXPECT_EQ(per_key[a], 2);
  EXPECT_EQ(per_key[b], 2);
  EXPECT_EQ(table.GetStats().size, 0);
  EXPECT_EQ(table.GetStats().counters.evictions, 2);
  EXPECT_EQ(table.FreeSlots().size(), 4u);
  // An empty table: the limiter refuses (timeout 0).
  EXPECT_THROW(Sample(table, Request(Strategy::kUniform, 1, 2, Cut::kStart)), Timeout);
}

TEST(TableModes, MaxTimesSampledCountsAcrossSamplesAndRestores) {
  Table table(Spec(4, /*max_times_sampled=*/3));
  const int64_t a = Put(table, 3);
  Sample(table, Request(Strategy::kUniform, 2, 2, Cut::kStart));
  EXPECT_EQ(table.PinItems()[0].times_sampled, 2);
  table.UnpinSlots({table.key_layout().Slot(a)});
  EXPECT_THROW(Sample(table, Request(Strategy::kUniform, 2, 2, Cut::kStart)), Timeout);
  EXPECT_EQ(table.GetStats().size, 1);  // a refused sample counts nothing
  EXPECT_THROW(table.RestoreTimesSampled(a, 3), InvalidArgument);
  EXPECT_THROW(table.RestoreTimesSampled(a + 1, 0), InvalidArgument);
  table.RestoreTimesSampled(a, 0);
  Sample(table, Request(Strategy::kUniform, 3, 2, Cut::kStart));
  EXPECT_EQ(table.GetStats().size, 0);
}

TEST(TableModes, AFreedSlotIsRewrittenOnlyAfterTheSampleThatFreedItEnds) {
  Table table(Spec(1, /*max_times_sampled=*/1));
  Put(table, 3);
  std::vector<Draw> draws(1);
  const uint32_t seed[2] = {1, 2};
  const uint64_t ticket =
      table.Select(Request(Strategy::kUniform, 1, 2, Cut::kStart), seed, draws.data());
  EXPECT_EQ(table.GetStats().size, 0);
  std::atomic<bool> inserted{false};
  std::thread writer([&] {
    Put(table, 2);
    inserted = true;
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(inserted.load());  // waits for the sample still reading the slot
  table.EndSample(ticket);
  writer.join();
  EXPECT_TRUE(inserted.load());
  EXPECT_EQ(table.GetStats().size, 1);
}

TEST(TableModes, ConstrainedSamplesWaitForEligibleItemsWithinTheTimeout) {
  Table table(Spec(4, /*max_times_sampled=*/1, /*timeout=*/5.0));
  Put(table, 3);
  std::thread writer([&] {
    std::this_thread::sleep_for(50ms);
    Put(table, 3);
  });
  const std::vector<Draw> draws = Sample(table, Request(Strategy::kUniform, 2, 2, Cut::kStart));
  writer.join();
  EXPECT_NE(draws[0].key, draws[1].key);
  Table short_wait(Spec(4, 1, 0.05));
  Put(short_wait, 3);
  EXPECT_THROW(Sample(short_wait, Request(Strategy::kUniform, 2, 2, Cut::kStart)), Timeout);
}

TEST(TableModes, GpuSamplesRefuseWhatTheHostMustSelect) {
  Table table(Spec(2, 1));
  EXPECT_TRUE(table.SelectsOnHost(Request(Strategy::kUniform, 1, 2, Cut::kStart)));
  Table plain(Spec(2));
  EXPECT_FALSE(plain.SelectsOnHost(Request(Strategy::kUniform, 1, 2, Cut::kEnd)));
  EXPECT_TRUE(plain.SelectsOnHost(Request(Strategy::kUniform, 1, 2, Cut::kFull)));
  EXPECT_TRUE(plain.SelectsOnHost(Request(Strategy::kTimestep, 1, 2, Cut::kStart, false)));
  GpuSelection selection;
  EXPECT_THROW(
      TableGpu(plain).BeginSample(Request(Strategy::kUniform, 1, 2, Cut::kFull), &selection),
      InvalidArgument);
}

TEST(TableModes, RejectsBadCutsAndLimits) {
  Table table(Spec(2));
  Put(table, 2);
  SampleRequest r = Request(Strategy::kUniform, 1, 2, Cut::kStart);
  r.cut = static_cast<Cut>(7);
  EXPECT_THROW(Sample(table, r), InvalidArgument);
  EXPECT_THROW(Table(Spec(2, -1)), InvalidArgument);
}

TEST(TableModes, FullWindowsByRejectionAndByListingAgree) {
  // Few eligible items (1 in 21) send cut="full" to the listing path; many
  // (1 in 2) to rejection from the selectors. Both give exact probabilities.
  for (int shorts : {20, 1}) {
    Table table(Spec(32));
    for (int i = 0; i < shorts; ++i) Put(table, 1);
    const int64_t long_key = Put(table, 10);
    for (Strategy s : {Strategy::kUniform, Strategy::kTimestep}) {
      for (const Draw& d : Sample(table, Request(s, 200, 10, Cut::kFull), 3)) {
        ASSERT_EQ(d.key, long_key) << shorts;
        EXPECT_FLOAT_EQ(d.probability, 1.0f);
        EXPECT_EQ(d.start, 0);
        EXPECT_EQ(d.valid, 10);
      }
    }
  }
}

// Prioritized, window 5, alpha 1: a (5 steps, priority 1) and b (10 steps,
// priority 3) may be drawn, 1/4 and 3/4 of the time; two items too short
// hold the rest of the weight.
void ExpectPrioritizedFullDraws(Table& table, int64_t a, int64_t b, const char* what) {
  const std::vector<Draw> draws =
      Sample(table, Request(Strategy::kPrioritized, 4000, 5, Cut::kFull, true, 0, 1.0), 13);
  int64_t from_b = 0;
  for (const Draw& d : draws) {
    ASSERT_TRUE(d.key == a || d.key == b) << what;
    EXPECT_FLOAT_EQ(d.probability, d.key == a ? 0.25f : 0.75f) << what;
    EXPECT_EQ(d.valid, 5) << what;
    from_b += d.key == b;
  }
  EXPECT_NEAR(static_cast<double>(from_b) / 4000.0, 0.75, 0.035) << what;  // 5 sigma: 0.034
}

TEST(TableModes, PrioritizedFullWindowsWeighOnlyTheEligible) {
  for (double short_priority : {1.0, 40.0}) {
    // Short items holding a third of the weight: rows drawn by rejection,
    // normalised by the weight of the items long enough. Holding 80 of 84:
    // fewer than 1 draw in 16 would be kept, and the table is listed.
    Table table(Spec(16));
    const int64_t shorts[2] = {Put(table, 2, short_priority), Put(table, 3, short_priority)};
    const int64_t a = Put(table, 5, 1.0), b = Put(table, 10, 3.0);
    ExpectPrioritizedFullDraws(table, a, b, short_priority == 1.0 ? "rejection" : "listing");
    // New priorities of the short items change the weight the draw leaves out.
    const double lower[2] = {0.5, 0.25};
    ASSERT_EQ(table.UpdatePriorities(shorts, lower, 2), 2);
    ExpectPrioritizedFullDraws(table, a, b, "after an update of the short items");
  }
}

TEST(TableModes, PrioritizedFullWindowsOfOnlyLongItemsAreThePlainDraws) {
  // Once the short items are evicted every item fits a window: the rows are
  // those cut="start" draws with the same seed, at the same probabilities.
  Table table(Spec(2));
  Put(table, 2, 9.0);
  Put(table, 3, 9.0);
  const int64_t a = Put(table, 5, 1.0), b = Put(table, 10, 3.0);
  ExpectPrioritizedFullDraws(table, a, b, "long items only");
  const auto full =
      Sample(table, Request(Strategy::kPrioritized, 500, 5, Cut::kFull, true, 0, 1.0));
  const auto start =
      Sample(table, Request(Strategy::kPrioritized, 500, 5, Cut::kStart, true, 0, 1.0));
  for (size_t i = 0; i < full.size(); ++i) {
    ASSERT_EQ(full[i].key, start[i].key) << i;
    EXPECT_EQ(full[i].probability, start[i].probability) << i;
  }
}

TEST(TableModes, FullWindowsByRejectionFollowTheFullWindowCounts) {
  Table table(Spec(8));
  const int64_t a = Put(table, 4), b = Put(table, 7);  // window 4: 1 and 4 full windows
  Put(table, 2);
  const std::vector<Draw> draws =
      Sample(table, Request(Strategy::kTimestep, 5000, 4, Cut::kFull), 11);
  int64_t from_b = 0;
  for (const Draw& d : draws) {
    ASSERT_TRUE(d.key == a || d.key == b);
    EXPECT_FLOAT_EQ(d.probability, d.key == a ? 0.2f : 0.8f);
    from_b += d.key == b;
  }
  EXPECT_NEAR(static_cast<double>(from_b) / 5000.0, 0.8, 0.03);  // 5 sigma: 0.028
}

}  // namespace
}  // namespace gearjax
