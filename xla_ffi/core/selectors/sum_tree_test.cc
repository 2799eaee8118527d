// Tests of the eight-way sum tree: totals, draws against a brute-force
// cumulative sum, zero-weight leaves never drawn, batched updates and draws
// equal to the one-at-a-time ones (batched draws with every CPU kernel), no
// drift.
#include "core/selectors/sum_tree.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "core/cpu_simd.h"

namespace gearjax {
namespace {

// Every SIMD level DrawMany has a kernel for; where the processor lacks one,
// pinning it runs the baseline kernel again (cpu_simd_test.cc says which).
constexpr SimdLevel kLevels[] = {SimdLevel::kBaseline, SimdLevel::kAvx2};

// The leaf a draw of u must give for integer weights (sums are exact).
int64_t BruteForceDraw(const std::vector<double>& w, double u) {
  double total = 0;
  for (double x : w) total += x;
  double target = u * total, cumulative = 0;
  int64_t last_positive = -1;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] <= 0) continue;
    last_positive = static_cast<int64_t>(i);
    cumulative += w[i];
    if (target < cumulative) return last_positive;
  }
  return last_positive;
}

class SumTreeSizes : public ::testing::TestWithParam<int64_t> {};

TEST_P(SumTreeSizes, TotalsAndDrawsMatchABruteForceSum) {
  const int64_t n = GetParam();
  SumTree tree(n, /*gpu_mapped=*/false);
  std::mt19937_64 rng(n);
  std::vector<double> w(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    w[i] = static_cast<double>(rng() % 4);  // many zeros
    tree.Set(i, w[i]);
  }
  w[n - 1] = 5;  // at least one positive weight
  tree.Set(n - 1, 5);
  double total = 0;
  for (double x : w) total += x;
  EXPECT_EQ(tree.Total(), total);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<double> us = {0.0, std::nextafter(1.0, 0.0), 0.5};
  for (int i = 0; i < 2000; ++i) us.push_back(uniform(rng));
  for (SimdLevel level : kLevels) {
    const ScopedSimdLevel pin(level);
    std::vector<int64_t> many(us.size());
    tree.DrawMany(us.data(), static_cast<int64_t>(us.size()), many.data());
    for (size_t i = 0; i < us.size(); ++i) {
      const int64_t leaf = tree.Draw(us[i]);
      ASSERT_EQ(leaf, BruteForceDraw(w, us[i])) << "u=" << us[i];
      ASSERT_GT(w[leaf], 0) << "drew a zero-weight leaf";
      ASSERT_EQ(many[i], leaf) << "DrawMany differs from Draw at SIMD level "
                               << static_cast<int>(level);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, SumTreeSizes,
                         ::testing::Values(1, 2, 7, 8, 9, 63, 64, 65, 511, 4097, 100000));

// DrawMany (the CPU's vectorised descent) against SumTreeDraw (the code GPU
// kernels run) where rounding decides: real weights over 40 binades with
// zeros between them, and u at and beside every leaf's cumulative boundary.
TEST(SumTree, DrawManyEqualsSumTreeDrawWhereRoundingDecides) {
  for (int64_t n : {9, 64, 1000, 40000}) {
    SumTree tree(n, false);
    std::mt19937_64 rng(static_cast<uint64_t>(n));
    std::vector<double> w(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      w[i] = rng() % 5 == 0 ? 0.0
                            : std::ldexp(1.0 + static_cast<double>(rng() % 1000003) / 1000003,
                                         -static_cast<int>(rng() % 40));
    }
    w[0] = 0.0;
    std::vector<int64_t> leaves(static_cast<size_t>(n));
    std::iota(leaves.begin(), leaves.end(), 0);
    tree.SetMany(leaves.data(), w.data(), n);
    std::vector<double> us = {0.0, std::nextafter(1.0, 0.0)};
    double cumulative = 0;
    for (int64_t i = 0; i < n && us.size() < 30000; ++i) {
      cumulative += w[i];
      const double u = cumulative / tree.Total();
      if (u >= 1.0) continue;
      us.push_back(u);
      us.push_back(std::nextafter(u, 0.0));
      us.push_back(std::nextafter(u, 1.0));
    }
    for (SimdLevel level : kLevels) {
      const ScopedSimdLevel pin(level);
      std::vector<int64_t> many(us.size());
      tree.DrawMany(us.data(), static_cast<int64_t>(us.size()), many.data());
      for (size_t i = 0; i < us.size(); ++i) {
        const int64_t leaf = SumTreeDraw(tree.view(), us[i]);
        ASSERT_EQ(many[i], leaf) << "n=" << n << " u=" << us[i] << " level "
                                 << static_cast<int>(level);
        ASSERT_GE(leaf, 0);
        ASSERT_GT(w[leaf], 0.0) << "drew a zero-weight leaf";
      }
    }
  }
}

// The CPU kernels against SumTreeChild on lines where rounding decides:
// weights over many binades with zeros between them, lines ending in zero
// weights (whose last prefix is summed another way than the one before it
// and may round below it), and targets at, just below and just above every
// prefix, at the line's sum (every prefix <= the target: the last positive
// child) and past it. Child and remaining target must agree bit for bit.
TEST(SumTree, EveryCpuKernelTakesTheChildAndTargetSumTreeChildTakes) {
  std::mt19937_64 rng(7);
  int64_t all_counted = 0, last_below = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    double line[8];
    for (double& x : line) {
      const uint64_t r = rng() % 6;
      x = r == 0 ? 0.0 : std::ldexp(1.0 + static_cast<double>(rng() % 1000003) / 1000003,
                                    -static_cast<int>(rng() % (r == 1 ? 60 : 3)));
    }
    if (trial % 3 == 0) line[7] = 0.0;
    if (trial % 5 == 0) line[0] = 0.0;
    const double s01 = line[0] + line[1], s23 = line[2] + line[3];
    const double s45 = line[4] + line[5], s67 = line[6] + line[7];
    const double s03 = s01 + s23, p5 = s03 + s45;
    const double prefix[8] = {line[0], s01, s01 + line[2], s03, s03 + line[4], p5,
                              p5 + line[6], s03 + (s45 + s67)};
    last_below += prefix[7] < prefix[6];
    std::vector<double> targets = {0.0, prefix[7] * 2};
    for (double p : prefix) {
      targets.insert(targets.end(), {p, std::nextafter(p, 0.0), std::nextafter(p, 1e300)});
    }
    for (double t : targets) {
      double want_target = t;
      const int want = SumTreeChild(line, &want_target);
      all_counted += t >= prefix[7] && t >= prefix[6];
      for (SimdLevel level : kLevels) {
        const ScopedSimdLevel pin(level);
        double got_target = t;
        ASSERT_EQ(SumTreeChildCpu(line, &got_target), want)
            << "trial " << trial << " t=" << t << " level " << static_cast<int>(level);
        ASSERT_EQ(got_target, want_target)
            << "trial " << trial << " t=" << t << " level " << static_cast<int>(level);
      }
    }
  }
  EXPECT_GT(all_counted, 1000);  // the rounding branch ran
  EXPECT_GT(last_below, 10);     // and lines whose last prefix rounds below the one before
}

// Prefetching each drawn leaf's record (LeafPrefetch) changes no draw.
TEST(SumTree, PrefetchingRecordsChangesNoDraw) {
  const int64_t n = 5000;
  SumTree tree(n, false);
  std::mt19937_64 rng(3);
  for (int64_t i = 0; i < n; ++i) tree.Set(i, static_cast<double>(rng() % 3));
  std::vector<double> us(1000);
  for (double& u : us) u = static_cast<double>(rng() % 1000000) / 1000000;
  std::vector<char> records(static_cast<size_t>(n) * 32);
  for (SimdLevel level : kLevels) {
    const ScopedSimdLevel pin(level);
    std::vector<int64_t> plain(us.size()), prefetched(us.size());
    tree.DrawMany(us.data(), static_cast<int64_t>(us.size()), plain.data());
    tree.DrawMany(us.data(), static_cast<int64_t>(us.size()), prefetched.data(),
                  LeafPrefetch{records.data(), 32});
    EXPECT_EQ(plain, prefetched);
  }
}

TEST(SumTree, DrawFrequenciesFollowTheWeights) {
  const std::vector<double> w = {1, 0, 2, 0, 0, 4, 1, 0, 0, 8};
  SumTree tree(static_cast<int64_t>(w.size()), false);
  for (size_t i = 0; i < w.size(); ++i) tree.Set(static_cast<int64_t>(i), w[i]);
  const int m = 16000;  // a grid of u: counts are exact multiples of the weights
  std::vector<int> counts(w.size());
  for (int i = 0; i < m; ++i) ++counts[tree.Draw((i + 0.5) / m)];
  for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(counts[i], static_cast<int>(w[i] / 16 * m));
}

TEST(SumTree, SetManyEqualsSetOneAtATimeAndLastDuplicateWins) {
  const int64_t n = 5000;
  SumTree one(n, false), many(n, false);
  std::mt19937_64 rng(7);
  std::vector<int64_t> leaves;
  std::vector<double> weights;
  for (int i = 0; i < 3000; ++i) {
    leaves.push_back(static_cast<int64_t>(rng() % n));
    weights.push_back(std::ldexp(static_cast<double>(rng() % 1000), -static_cast<int>(rng() % 40)));
  }
  leaves.push_back(leaves[0]);  // a duplicate: its last weight wins
  weights.push_back(123.0);
  for (size_t i = 0; i < leaves.size(); ++i) one.Set(leaves[i], weights[i]);
  many.SetMany(leaves.data(), weights.data(), static_cast<int64_t>(leaves.size()));
  EXPECT_EQ(many.Get(leaves[0]), 123.0);
  EXPECT_EQ(one.Total(), many.Total());  // bit for bit: same sums, same order
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(one.Get(i), many.Get(i));
  for (double u : {0.1, 0.37, 0.999}) EXPECT_EQ(one.Draw(u), many.Draw(u));
  // Inner nodes too, and again after more batches (SetMany's scratch starts
  // clean every time).
  for (int round = 0; round < 5; ++round) {
    for (size_t i = 0; i < leaves.size(); ++i) leaves[i] = static_cast<int64_t>(rng() % n);
    for (size_t i = 0; i < leaves.size(); ++i) one.Set(leaves[i], weights[i]);
    many.SetMany(leaves.data(), weights.data(), static_cast<int64_t>(leaves.size()));
    const SumTreeView a = one.view(), b = many.view();
    for (int64_t i = 0; i <= a.offsets[a.levels - 1]; ++i) ASSERT_EQ(a.nodes[i], b.nodes[i]) << i;
  }
}

TEST(SumTree, SumsNeverDrift) {
  const int64_t n = 1000;
  SumTree tree(n, false);
  std::mt19937_64 rng(3);
  for (int i = 0; i < 200000; ++i) {
    tree.Set(static_cast<int64_t>(rng() % n), std::ldexp(1.0 + (rng() % 97), -(int)(rng() % 30)));
  }
  for (int64_t i = 0; i < n; ++i) tree.Set(i, 0.0);
  EXPECT_EQ(tree.Total(), 0.0);  // recomputed from children, not accumulated
  tree.Set(17, 1.0);
  EXPECT_EQ(tree.Total(), 1.0);
  EXPECT_EQ(tree.Draw(0.999999), 17);
}

// SumTreeChild, the step of every descent (the one-sided sampler's too, on
// lines it read), against the interval each child's weight spans: the
// child whose [before, before + w) holds the target, never a zero-weight one;
// past the end (rounding), the last positive child; a line without weight
// gives -1.
TEST(SumTree, SumTreeChildTakesTheIntervalHoldingTheTarget) {
  std::mt19937_64 rng(0);
  std::uniform_int_distribution<int> weight(0, 3);
  for (int trial = 0; trial < 2000; ++trial) {
    double line[kSumTreeFanout];
    double total = 0;
    for (double& w : line) total += (w = weight(rng));
    if (total == 0) line[3] = total = 1;
    const double target = trial < 5 ? total : std::uniform_real_distribution<>(0, total)(rng);
    int want = -1;
    double before = 0, want_rest = 0;
    for (int c = 0; c < kSumTreeFanout; ++c) {
      if (line[c] > 0 && before <= target && target < before + line[c]) {
        want = c;
        want_rest = target - before;
        break;
      }
      before += line[c];
    }
    if (want < 0) {  // past the end: the last positive child
      for (int c = kSumTreeFanout - 1; want < 0; --c) want = line[c] > 0 ? c : -1;
      want_rest = target - (total - line[want]);
    }
    double rest = target;
    ASSERT_EQ(SumTreeChild(line, &rest), want) << "trial " << trial;
    EXPECT_DOUBLE_EQ(rest, want_rest);
  }
  const double empty[kSumTreeFanout] = {};
  double t = 0.5;
  EXPECT_EQ(SumTreeChild(empty, &t), -1);
}

TEST(SumTree, AnEmptyTreeDrawsNothing) {
  SumTree tree(100, false);
  EXPECT_EQ(tree.Draw(0.5), -1);
  for (SimdLevel level : kLevels) {
    const ScopedSimdLevel pin(level);
    int64_t leaf = 0;
    const double u = 0.5;
    tree.DrawMany(&u, 1, &leaf);
    EXPECT_EQ(leaf, -1);
  }
}

TEST(SumTree, TinyWeightsBesideHugeOnesStayDrawable) {
  SumTree tree(16, false);
  tree.Set(3, 1e240);
  tree.Set(9, 2.2250738585072014e-308);  // the smallest normal double
  EXPECT_GT(tree.Get(9), 0.0);
  EXPECT_TRUE(std::isfinite(tree.Total()));
  // u = 0 lands on the first positive leaf; the tiny one sits after leaf 3.
  EXPECT_EQ(tree.Draw(0.0), 3);
}

}  // namespace
}  // namespace gearjax
