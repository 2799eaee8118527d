// Tests of the constrained draw: budgets are never exceeded (also within one
// batch), draws follow the weights among the candidates left, and each row
// reports its conditional probability.
#include "core/selectors/constrained.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "core/random.h"

namespace gearjax {
namespace {

std::vector<double> Uniforms(uint32_t seed0, int64_t n) {
  const uint32_t seed[2] = {seed0, 5};
  std::vector<double> u(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const Words4 w = RowWords(seed, i);
    u[i] = UniformFromBits(w.w[0], w.w[1]);
  }
  return u;
}

TEST(TotalBudget, SumsAndSaturates) {
  const std::vector<Candidate> c = {{0, 1.0, 2}, {1, 1.0, 3}};
  EXPECT_EQ(TotalBudget(c, 100), 5);
  EXPECT_EQ(TotalBudget(c, 4), 4);
  EXPECT_EQ(TotalBudget({}, 4), 0);
}

TEST(ConstrainedDraw, WithoutReplacementDrawsEveryCandidateOnceWhenTheBatchTakesAll) {
  std::vector<Candidate> c;
  for (int64_t s = 0; s < 50; ++s) c.push_back({s * 3, 1.0 + static_cast<double>(s % 7), 1});
  for (uint32_t seed = 0; seed < 20; ++seed) {
    const std::vector<double> u = Uniforms(seed, 50);
    std::vector<Selection> out(50);
    ConstrainedDraw draw;
    draw.Draw(c, u.data(), 50, out.data());
    std::map<int64_t, int> seen;
    for (const Selection& s : out) ++seen[s.slot];
    ASSERT_EQ(seen.size(), 50u);
    for (const auto& [slot, n] : seen) EXPECT_EQ(n, 1) << slot;
    // The last row had one candidate left: probability 1.
    EXPECT_DOUBLE_EQ(out.back().probability, 1.0);
  }
}

TEST(ConstrainedDraw, BudgetsBoundDrawsWithinOneBatch) {
  const std::vector<Candidate> c = {{7, 100.0, 2}, {8, 1.0, 5}, {9, 1.0, 1}};
  const std::vector<double> u = Uniforms(3, 8);
  std::vector<Selection> out(8);
  ConstrainedDraw draw;
  draw.Draw(c, u.data(), 8, out.data());
  std::map<int64_t, int> seen;
  for (const Selection& s : out) ++seen[s.slot];
  EXPECT_EQ(seen[7], 2);
  EXPECT_EQ(seen[8], 5);
  EXPECT_EQ(seen[9], 1);
}

TEST(ConstrainedDraw, RowsReportTheirConditionalProbability) {
  // Weights 1, 2, 5 without replacement: the first row has w / 8, the
  // second w / (8 - first's weight).
  const std::vector<Candidate> c = {{0, 1.0, 1}, {1, 2.0, 1}, {2, 5.0, 1}};
  for (uint32_t seed = 0; seed < 50; ++seed) {
    const std::vector<double> u = Uniforms(seed, 2);
    std::vector<Selection> out(2);
    ConstrainedDraw draw;
    draw.Draw(c, u.data(), 2, out.data());
    const double w0 = c[out[0].slot].weight, w1 = c[out[1].slot].weight;
    EXPECT_DOUBLE_EQ(out[0].probability, w0 / 8.0);
    EXPECT_DOUBLE_EQ(out[1].probability, w1 / (8.0 - w0));
    EXPECT_NE(out[0].slot, out[1].slot);
  }
}

TEST(ConstrainedDraw, FirstRowsFollowTheWeights) {
  // The first row of many batches: chi-square against weights 1..4.
  const std::vector<Candidate> c = {{0, 1.0, 1}, {1, 2.0, 1}, {2, 3.0, 1}, {3, 4.0, 1}};
  const int trials = 20000;
  std::vector<int> counts(4, 0);
  ConstrainedDraw draw;
  const std::vector<double> u = Uniforms(17, trials);
  for (int t = 0; t < trials; ++t) {
    Selection out;
    draw.Draw(c, &u[t], 1, &out);
    ++counts[out.slot];
  }
  double chi2 = 0;
  for (int i = 0; i < 4; ++i) {
    const double expected = trials * (i + 1) / 10.0;
    chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  EXPECT_LT(chi2, 16.27);  // 3 degrees of freedom, p = 0.001
}

TEST(ConstrainedDraw, UnlimitedBudgetsDrawWithReplacementByWeight) {
  const std::vector<Candidate> c = {{4, 1.0, 1000}, {5, 3.0, 1000}};
  const std::vector<double> u = Uniforms(9, 1000);
  std::vector<Selection> out(1000);
  ConstrainedDraw draw;
  draw.Draw(c, u.data(), 1000, out.data());
  int fives = 0;
  for (const Selection& s : out) {
    fives += s.slot == 5;
    EXPECT_DOUBLE_EQ(s.probability, s.slot == 5 ? 0.75 : 0.25);
  }
  EXPECT_NEAR(fives / 1000.0, 0.75, 0.05);
}

TEST(ConstrainedDraw, RefusesMoreRowsThanTheBudgetsAllow) {
  const std::vector<Candidate> c = {{0, 1.0, 1}};
  const std::vector<double> u = Uniforms(0, 2);
  std::vector<Selection> out(2);
  ConstrainedDraw draw;
  EXPECT_THROW(draw.Draw(c, u.data(), 2, out.data()), std::logic_error);
}

}  // namespace
}  // namespace gearjax
