// Tests of the sampling-selector interface (selector.h), through the
// interface alone, as Table::SelectLocked uses it: every strategy's selector
// draws a batch with SelectMany (TopK and Recent as their Select row by row,
// with the batch's count), names the tree it descends (none for the ranking
// ones) or lists its best items (only the ranking ones), lists a constrained
// sample's candidates with their weights and says whether the GPU kernels
// can draw from it (on a table not GPU-mapped: refused with the reason, or
// false for the host-only ones).
#include "core/selectors/selector.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <vector>

#include "core/gpu/gpu_selection.h"
#include "core/random.h"
#include "core/selectors/prioritized.h"
#include "core/selectors/recent.h"
#include "core/selectors/timestep.h"
#include "core/selectors/topk.h"
#include "core/selectors/uniform.h"
#include "core/table/slots.h"

namespace gearjax {
namespace {

constexpr int64_t kCapacity = 16;

// Items 0..9 in slots 0..9, key = slot, length slot + 1, priority slot + 1.
template <typename S>
std::unique_ptr<SamplingSelector> Filled(std::unique_ptr<S> selector) {
  for (int64_t s = 0; s < 10; ++s) selector->Insert({s, s, s + 1, static_cast<double>(s + 1)});
  return selector;
}

std::vector<std::unique_ptr<SamplingSelector>> All() {
  std::vector<std::unique_ptr<SamplingSelector>> all;
  all.push_back(Filled(std::make_unique<UniformSelector>(kCapacity, false)));
  all.push_back(Filled(std::make_unique<TimestepSelector>(kCapacity, false)));
  all.push_back(Filled(std::make_unique<PrioritizedSelector>(0.5, kCapacity, false)));
  all.push_back(Filled(std::make_unique<TopKSelector>()));
  all.push_back(Filled(std::make_unique<RecentSelector>()));
  return all;
}

TEST(SamplingSelector, EveryStrategyDrawsABatchOfLiveSlotsWithTheirProbabilities) {
  const uint32_t seed[2] = {7, 9};
  std::vector<double> u(64);
  for (size_t b = 0; b < u.size(); ++b) {
    const Words4 w = RowWords(seed, static_cast<int64_t>(b));
    u[b] = UniformFromBits(w.w[0], w.w[1]);
  }
  for (const auto& selector : All()) {
    std::vector<Selection> out(u.size());
    selector->SelectMany({seed, u.data(), static_cast<int64_t>(u.size()), 4, {}}, out.data());
    for (const Selection& s : out) {
      EXPECT_GE(s.slot, 0);
      EXPECT_LT(s.slot, 10);
      EXPECT_GT(s.probability, 0.0);
      EXPECT_LE(s.probability, 1.0);
    }
  }
}

TEST(SamplingSelector, RankingSelectorsDrawTheirSelectPerRowWithTheBatchCount) {
  TopKSelector topk;
  RecentSelector recent;
  for (int64_t s = 0; s < 10; ++s) {
    topk.Insert({s, s, 1, static_cast<double>(s % 4)});
    recent.Insert({s, s, 1, 1.0});
  }
  const std::vector<double> u = {0.0, 0.2, 0.5, 0.99};
  std::vector<Selection> a(u.size()), b(u.size());
  topk.SelectMany({nullptr, u.data(), 4, 3, {}}, a.data());
  recent.SelectMany({nullptr, u.data(), 4, 3, {}}, b.data());
  for (size_t i = 0; i < u.size(); ++i) {
    EXPECT_EQ(a[i].slot, topk.Select(u[i], 3).slot);
    EXPECT_DOUBLE_EQ(a[i].probability, 1.0 / 3);
    EXPECT_EQ(b[i].slot, recent.Select(u[i], 3).slot);
  }
}

TEST(SamplingSelector, TreesAreNamedByTheTreeStrategiesOnly) {
  const auto all = All();
  for (size_t i = 0; i < all.size(); ++i) {
    const bool ranks = i >= 3;  // TopK, Recent
    EXPECT_EQ(all[i]->DrawTree() == nullptr, ranks) << i;
    if (!ranks) {
      EXPECT_GT(all[i]->DrawTree()->Total(), 0.0);
    }
  }
}

TEST(SamplingSelector, RankingSelectorsListTheirBestFirstAndOthersNone) {
  const auto all = All();
  for (size_t i = 0; i < all.size(); ++i) {
    if (i < 3) {  // Uniform, Timestep, Prioritized weigh: nothing to rank
      EXPECT_TRUE(all[i]->Best(3).empty()) << i;
      continue;
    }
    // TopK by priority (slot + 1), Recent by key (slot): slot 9 is best.
    EXPECT_EQ(all[i]->Best(3), (std::vector<int64_t>{9, 8, 7})) << i;
    EXPECT_EQ(all[i]->Best(50).size(), 10u) << i;
    EXPECT_TRUE(all[i]->Best(0).empty()) << i;
  }
}

TEST(SamplingSelector, OnlyTreeAndUniformStrategiesDescribeThemselvesToTheGpu) {
  const auto all = All();
  for (size_t i = 0; i < all.size(); ++i) {
    GpuSelection selection{};
    if (i >= 3) {
      EXPECT_FALSE(all[i]->DescribeForGpu(&selection)) << i;  // host-only: TopK, Recent
    } else {
      // Not GPU-mapped here: refused, saying which memory is missing.
      EXPECT_THROW(all[i]->DescribeForGpu(&selection), InvalidArgument) << i;
    }
  }
}

// Slot records for All()'s items (slots 0..9 live, slot s of length s + 1,
// key s), the other slots empty.
std::vector<SlotInfo> Records() {
  std::vector<SlotInfo> slots(kCapacity, SlotInfo{0, 0, 0.0, 0, SlotState::kFree});
  for (int64_t s = 0; s < 10; ++s) slots[s] = {s, s + 1, static_cast<double>(s + 1), 0,
                                               SlotState::kLive};
  return slots;
}

TEST(SamplingSelector, ListsTheEligibleCandidatesWithTheStrategysWeights) {
  const std::vector<SlotInfo> slots = Records();
  const CandidateScan scan{slots.data(), kCapacity, /*full_window=*/4, /*count=*/3};
  const auto all = All();
  std::vector<std::vector<Candidate>> lists(all.size());
  for (size_t i = 0; i < all.size(); ++i) all[i]->ListCandidates(scan, &lists[i]);
  // Slots 3..9 hold at least 4 steps. Uniform: weight 1, slot order.
  ASSERT_EQ(lists[0].size(), 7u);
  for (size_t j = 0; j < 7; ++j) {
    EXPECT_EQ(lists[0][j].slot, static_cast<int64_t>(3 + j));
    EXPECT_EQ(lists[0][j].weight, 1.0);
  }
  // Timestep: full windows, length - 4 + 1.
  ASSERT_EQ(lists[1].size(), 7u);
  for (const Candidate& w : lists[1]) EXPECT_EQ(w.weight, static_cast<double>(w.slot + 1 - 3));
  // Prioritized (alpha 0.5): priority ** 0.5, as its tree holds it.
  ASSERT_EQ(lists[2].size(), 7u);
  for (const Candidate& w : lists[2]) {
    EXPECT_DOUBLE_EQ(w.weight, std::pow(static_cast<double>(w.slot + 1), 0.5));
  }
  // TopK(3) and Recent(3): the three best eligible, best first.
  ASSERT_EQ(lists[3].size(), 3u);
  ASSERT_EQ(lists[4].size(), 3u);
  for (size_t j = 0; j < 3; ++j) {
    EXPECT_EQ(lists[3][j].slot, static_cast<int64_t>(9 - j));  // highest priority first
    EXPECT_EQ(lists[4][j].slot, static_cast<int64_t>(9 - j));  // newest first
  }
  // Without cut="full" every live item is eligible; the ranked lists stop at count.
  std::vector<Candidate> any;
  all[0]->ListCandidates({slots.data(), kCapacity, 0, 3}, &any);
  EXPECT_EQ(any.size(), 10u);
}

}  // namespace
}  // namespace gearjax
