// Tests of Recent(n): uniform over the n newest, whatever leaves.
#include "core/selectors/recent.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

namespace gearjax {
namespace {

Item ItemAt(int64_t slot, int64_t key) { return {slot, key, 1, 1.0}; }

TEST(RecentSelector, DrawsUniformlyOverTheNNewest) {
  RecentSelector recent;
  for (int64_t k = 0; k < 6; ++k) recent.Insert(ItemAt(10 + k, k * 4));
  recent.Delete(ItemAt(15, 20));  // the newest leaves
  std::map<int64_t, int> counts;
  for (int i = 0; i < 300; ++i) {
    const Selection s = recent.Select((i + 0.5) / 300, 3);
    ++counts[s.slot];
    EXPECT_DOUBLE_EQ(s.probability, 1.0 / 3);
  }
  EXPECT_EQ(counts, (std::map<int64_t, int>{{12, 100}, {13, 100}, {14, 100}}));
  // n beyond the size: all of them.
  EXPECT_DOUBLE_EQ(recent.Select(0.5, int64_t{1} << 40).probability, 1.0 / 5);
}

}  // namespace
}  // namespace gearjax
