// Tests of Timestep: draws in proportion to length, removed slots never drawn.
#include "core/selectors/timestep.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

namespace gearjax {
namespace {

Item ItemAt(int64_t slot, int64_t length = 1) { return {slot, slot * 100, length, 1.0}; }

TEST(TimestepSelector, DrawsInProportionToLength) {
  TimestepSelector timestep(8, false);
  timestep.Insert(ItemAt(1, 10));
  timestep.Insert(ItemAt(5, 30));
  timestep.Insert(ItemAt(6, 60));
  timestep.Delete(ItemAt(6, 60));
  timestep.Insert(ItemAt(2, 60));
  const int m = 1000;
  std::vector<double> u(m);
  for (int i = 0; i < m; ++i) u[i] = (i + 0.5) / m;
  std::vector<Selection> out(m);
  timestep.SelectMany({nullptr, u.data(), m, 0, {}}, out.data());
  std::map<int64_t, int> counts;
  for (const Selection& s : out) {
    ++counts[s.slot];
    EXPECT_DOUBLE_EQ(s.probability, s.slot == 1 ? 0.1 : s.slot == 5 ? 0.3 : 0.6);
  }
  EXPECT_EQ(counts, (std::map<int64_t, int>{{1, 100}, {2, 600}, {5, 300}}));
}

}  // namespace
}  // namespace gearjax
