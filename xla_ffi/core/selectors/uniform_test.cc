// Tests of Uniform and Timestep: draws follow the weights, removed slots are
// never drawn, and a draw depends only on which slots are live.
#include "core/selectors/uniform.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <vector>

namespace gearjax {
namespace {

Item ItemAt(int64_t slot, int64_t length = 1) { return {slot, slot * 100, length, 1.0}; }

std::vector<Selection> Grid(const WeightTreeSelector& selector, int m) {
  std::vector<double> u(m);
  for (int i = 0; i < m; ++i) u[i] = (i + 0.5) / m;
  std::vector<Selection> out(m);
  selector.SelectMany(u.data(), m, out.data());
  return out;
}

TEST(UniformSelector, DrawsEveryLiveSlotEquallyAndNeverARemovedOne) {
  UniformSelector uniform(10, false);
  for (int64_t s : {4, 0, 9, 2, 7}) uniform.Insert(ItemAt(s));
  uniform.Delete(ItemAt(0));
  uniform.Delete(ItemAt(7));
  std::map<int64_t, int> counts;
  for (const Selection& s : Grid(uniform, 3000)) {
    ++counts[s.slot];
    EXPECT_DOUBLE_EQ(s.probability, 1.0 / 3);
  }
  EXPECT_EQ(counts, (std::map<int64_t, int>{{2, 1000}, {4, 1000}, {9, 1000}}));
}

TEST(UniformSelector, DrawsDependOnlyOnWhichSlotsAreLive) {
  UniformSelector a(64, false), b(64, false);
  for (int64_t s = 0; s < 64; ++s) a.Insert(ItemAt(s));
  for (int64_t s : {63, 0, 31, 32, 1, 62, 5}) a.Delete(ItemAt(s));
  for (int64_t s = 63; s >= 0; --s) {  // the same live set, built another way
    if (s != 63 && s != 0 && s != 31 && s != 32 && s != 1 && s != 62 && s != 5) b.Insert(ItemAt(s));
  }
  const std::vector<Selection> x = Grid(a, 500), y = Grid(b, 500);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i].slot, y[i].slot);
}

TEST(TimestepSelector, DrawsInProportionToLength) {
  TimestepSelector timestep(8, false);
  timestep.Insert(ItemAt(1, 10));
  timestep.Insert(ItemAt(5, 30));
  timestep.Insert(ItemAt(6, 60));
  timestep.Delete(ItemAt(6, 60));
  timestep.Insert(ItemAt(2, 60));
  std::map<int64_t, int> counts;
  for (const Selection& s : Grid(timestep, 1000)) {
    ++counts[s.slot];
    EXPECT_DOUBLE_EQ(s.probability, s.slot == 1 ? 0.1 : s.slot == 5 ? 0.3 : 0.6);
  }
  EXPECT_EQ(counts, (std::map<int64_t, int>{{1, 100}, {2, 600}, {5, 300}}));
}

}  // namespace
}  // namespace gearjax
