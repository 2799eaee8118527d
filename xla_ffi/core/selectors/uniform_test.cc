// Tests of Uniform (rejection over the live bitmap, sum-tree fallback): draws
// follow the weights, removed slots are never drawn, and a draw depends only
// on which slots are live.
#include "core/selectors/uniform.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <vector>

namespace gearjax {
namespace {

Item ItemAt(int64_t slot, int64_t length = 1) { return {slot, slot * 100, length, 1.0}; }

// Row i's attempt-0 uniform, as Table::Select computes it.
std::vector<double> RowUniforms(const uint32_t seed[2], int64_t n) {
  std::vector<double> u(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const Words4 w = RowWords(seed, i);
    u[i] = UniformFromBits(w.w[0], w.w[1]);
  }
  return u;
}

std::map<int64_t, int> Counts(const UniformSelector& uniform, int64_t n, uint32_t seed0 = 3) {
  const uint32_t seed[2] = {seed0, 9};
  const std::vector<double> u = RowUniforms(seed, n);
  std::vector<Selection> out(static_cast<size_t>(n));
  uniform.SelectMany({seed, u.data(), n, 0, {}}, out.data());
  std::map<int64_t, int> counts;
  for (const Selection& s : out) {
    EXPECT_DOUBLE_EQ(s.probability, 1.0 / static_cast<double>(uniform.size()));
    ++counts[s.slot];
  }
  return counts;
}

TEST(UniformSelector, DrawsOnlyLiveSlotsEquallyOftenInAFullTable) {
  UniformSelector uniform(64, false);
  for (int64_t s = 0; s < 64; ++s) uniform.Insert(ItemAt(s));
  for (int64_t s : {0, 7, 63}) uniform.Delete(ItemAt(s));
  const int64_t n = 61 * 400;
  const std::map<int64_t, int> counts = Counts(uniform, n);
  EXPECT_EQ(counts.size(), 61u);
  for (int64_t s : {0, 7, 63}) EXPECT_EQ(counts.count(s), 0u);
  double chi2 = 0;  // 60 degrees of freedom: 120 is far beyond p = 1e-5
  for (const auto& [slot, c] : counts) chi2 += (c - 400.0) * (c - 400.0) / 400.0;
  EXPECT_LT(chi2, 120.0);
}

TEST(UniformSelector, ASparseTableFallsBackToTheTreeAndStaysUniform) {
  UniformSelector uniform(4096, false);
  for (int64_t s : {5, 999, 4095}) uniform.Insert(ItemAt(s));  // 3 of 4096 live
  const std::map<int64_t, int> counts = Counts(uniform, 3000);
  ASSERT_EQ(counts.size(), 3u);
  for (const auto& [slot, c] : counts) EXPECT_NEAR(c, 1000, 150) << slot;
}

TEST(UniformSelector, DrawsDependOnlyOnWhichSlotsAreLive) {
  UniformSelector a(64, false), b(64, false);
  const std::set<int64_t> gone = {63, 0, 31, 32, 1, 62, 5};
  for (int64_t s = 0; s < 64; ++s) a.Insert(ItemAt(s));
  for (int64_t s : gone) a.Delete(ItemAt(s));
  for (int64_t s = 63; s >= 0; --s) {  // the same live set, built another way
    if (!gone.count(s)) b.Insert(ItemAt(s));
  }
  EXPECT_EQ(Counts(a, 500), Counts(b, 500));
  const uint32_t seed[2] = {1, 2};
  const std::vector<double> u = RowUniforms(seed, 500);
  std::vector<Selection> x(500), y(500);
  a.SelectMany({seed, u.data(), 500, 0, {}}, x.data());
  b.SelectMany({seed, u.data(), 500, 0, {}}, y.data());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i].slot, y[i].slot);
}

TEST(UniformSelector, AnEmptyTableDrawsNothing) {
  UniformSelector uniform(100, false);
  const uint32_t seed[2] = {0, 0};
  EXPECT_EQ(UniformDraw(uniform.view(), seed, 0, 0.5), -1);
}

}  // namespace
}  // namespace gearjax
