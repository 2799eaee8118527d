// Tests of the sampling-selector interface (selector.h), through the
// interface alone, as Table::SelectLocked uses it: every strategy's selector
// draws a batch with SelectMany (TopK and Recent as their Select row by row,
// with the batch's count), names the tree it descends (none for the ranking
// ones) and says whether the GPU kernels can draw from it (on a table not
// GPU-mapped: refused with the reason, or false for the host-only ones).
#include "core/selectors/selector.h"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <vector>

#include "core/gpu_selection.h"
#include "core/random.h"
#include "core/selectors/prioritized.h"
#include "core/selectors/recent.h"
#include "core/selectors/timestep.h"
#include "core/selectors/topk.h"
#include "core/selectors/uniform.h"

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

}  // namespace
}  // namespace gearjax
