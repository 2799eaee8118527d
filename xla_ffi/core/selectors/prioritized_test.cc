// Tests of Prioritized(alpha): weights, batched updates, draws.
#include "core/selectors/prioritized.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "core/limits.h"

namespace gearjax {
namespace {

TEST(PriorityWeight, FollowsTheContract) {
  EXPECT_EQ(PriorityWeight(0.0, 0.0), 1.0);   // alpha 0 is uniform, priority 0 included
  EXPECT_EQ(PriorityWeight(7.0, 0.0), 1.0);
  EXPECT_EQ(PriorityWeight(0.0, 0.6), 0.0);   // priority 0 is never drawn otherwise
  EXPECT_EQ(PriorityWeight(3.0, 1.0), 3.0);
  EXPECT_DOUBLE_EQ(PriorityWeight(4.0, 0.5), 2.0);
  // The extremes of the contract stay finite and positive.
  EXPECT_TRUE(std::isfinite(PriorityWeight(kMaxPriority, kMaxAlpha)));
  EXPECT_EQ(PriorityWeight(kMinPriority, kMaxAlpha), kMinWeight);
  EXPECT_EQ(PriorityWeight(1e-300, 2.0), kMinWeight);
}

TEST(PrioritizedSelector, DrawsInProportionToPriorityToTheAlpha) {
  PrioritizedSelector selector(0.5, 16, false);
  selector.Insert({3, 30, 1, 16.0});  // weight 4
  selector.Insert({7, 70, 1, 0.0});   // weight 0: never drawn
  selector.Insert({9, 90, 1, 36.0});  // weight 6
  const int m = 1000;
  std::vector<double> u(m);
  for (int i = 0; i < m; ++i) u[i] = (i + 0.5) / m;
  std::vector<Selection> out(m);
  selector.SelectMany({nullptr, u.data(), m, 0, {}}, out.data());
  std::map<int64_t, int> counts;
  for (const Selection& s : out) ++counts[s.slot];
  EXPECT_EQ(counts, (std::map<int64_t, int>{{3, 400}, {9, 600}}));
  EXPECT_DOUBLE_EQ(out[0].probability, 0.4);
}

TEST(PrioritizedSelector, BatchedUpdatesLetTheLastDuplicateWin) {
  PrioritizedSelector selector(1.0, 8, false);
  selector.Insert({0, 0, 1, 1.0});
  selector.Insert({1, 1, 1, 1.0});
  const Item before[3] = {{0, 0, 1, 1.0}, {1, 1, 1, 1.0}, {0, 0, 1, 5.0}};
  const double after[3] = {5.0, 0.0, 2.0};
  selector.UpdatePriorities(before, after, 3);
  EXPECT_EQ(selector.Total(), 2.0);
  EXPECT_EQ(selector.tree().Get(0), 2.0);
  EXPECT_EQ(selector.tree().Get(1), 0.0);
  selector.Delete({0, 0, 1, 2.0});
  EXPECT_EQ(selector.Total(), 0.0);
}

}  // namespace
}  // namespace gearjax
