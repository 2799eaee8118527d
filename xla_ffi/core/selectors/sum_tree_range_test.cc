// Range sums and draws (sum_tree_range.h) against sums and prefix searches
// over the leaves themselves, on trees of one to four levels and ranges of
// every alignment.
#include "core/selectors/sum_tree_range.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace gearjax {
namespace {

TEST(SumTreeRange, SumsEqualTheLeavesSumsForEveryRange) {
  for (int64_t leaves : {1, 8, 9, 300, 4100}) {
    SumTree tree(leaves, false);
    std::mt19937_64 rng(leaves);
    std::vector<double> w(leaves);
    for (int64_t i = 0; i < leaves; ++i) {
      w[i] = i % 7 == 0 ? 0.0 : static_cast<double>(rng() % 100) / 8.0;  // exact in binary
      tree.Set(i, w[i]);
    }
    for (int trial = 0; trial < 400; ++trial) {
      int64_t lo = static_cast<int64_t>(rng() % (leaves + 1));
      int64_t hi = static_cast<int64_t>(rng() % (leaves + 1));
      if (lo > hi) std::swap(lo, hi);
      double expected = 0.0;
      for (int64_t i = lo; i < hi; ++i) expected += w[i];
      EXPECT_EQ(SumTreeRangeSum(tree.view(), lo, hi), expected) << leaves << " " << lo << " " << hi;
    }
    EXPECT_EQ(SumTreeRangeSum(tree.view(), 0, leaves), tree.Total());
  }
}

TEST(SumTreeRange, DrawsPickTheLeafWhoseIntervalHoldsTheTarget) {
  const int64_t leaves = 600;
  SumTree tree(leaves, false);
  std::vector<double> w(leaves);
  for (int64_t i = 0; i < leaves; ++i) {
    w[i] = i % 5 == 0 ? 0.0 : static_cast<double>(1 + i % 13);
    tree.Set(i, w[i]);
  }
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 2000; ++trial) {
    int64_t lo = static_cast<int64_t>(rng() % leaves);
    int64_t hi = lo + 1 + static_cast<int64_t>(rng() % (leaves - lo));
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    const int64_t leaf = SumTreeDrawInRange(tree.view(), lo, hi, u);
    double total = 0.0;
    for (int64_t i = lo; i < hi; ++i) total += w[i];
    if (total == 0.0) {
      EXPECT_EQ(leaf, -1);
      continue;
    }
    ASSERT_GE(leaf, lo);
    ASSERT_LT(leaf, hi);
    EXPECT_GT(w[leaf], 0.0);
    double before = 0.0;  // the leaf's interval within the range holds u * total
    for (int64_t i = lo; i < leaf; ++i) before += w[i];
    const double target = u * total;
    EXPECT_LE(before, target * (1 + 1e-12) + 1e-9);
    EXPECT_GT(before + w[leaf], target * (1 - 1e-12) - 1e-9);
  }
}

TEST(SumTreeRange, EmptyAndZeroRangesDrawNothing) {
  SumTree tree(64, false);
  tree.Set(10, 2.0);
  EXPECT_EQ(SumTreeDrawInRange(tree.view(), 20, 40, 0.5), -1);
  EXPECT_EQ(SumTreeDrawInRange(tree.view(), 5, 5, 0.5), -1);
  EXPECT_EQ(SumTreeDrawInRange(tree.view(), 0, 64, 0.999999), 10);
  EXPECT_EQ(SumTreeRangeSum(tree.view(), 11, 11), 0.0);
}

}  // namespace
}  // namespace gearjax
