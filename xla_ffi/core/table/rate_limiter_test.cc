// Tests of the rate limiter: spec validation and the admit rules.
#include "core/table/rate_limiter.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/common.h"

namespace gearjax {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(RateLimiter, RefusesSpecsOutsideTheContract) {
  auto make = [](RateLimiterSpec s) { RateLimiter limiter(s, 100); };
  EXPECT_THROW(make({0, 0, -kInf, kInf, 0}), InvalidArgument);       // min_size 0
  EXPECT_THROW(make({101, 0, -kInf, kInf, 0}), InvalidArgument);     // above capacity
  EXPECT_THROW(make({1, -1, -kInf, kInf, 0}), InvalidArgument);      // negative ratio
  EXPECT_THROW(make({1, 1e308, -1, 1, 0}), InvalidArgument);         // huge ratio
  EXPECT_THROW(make({1, NAN, -1, 1, 0}), InvalidArgument);
  EXPECT_THROW(make({1, 2, 5, 1, 0}), InvalidArgument);              // min_diff > max_diff
  EXPECT_THROW(make({1, 2, -1e300, 1e300, 0}), InvalidArgument);     // diffs out of range
  EXPECT_THROW(make({1, 0, -kInf, kInf, -1}), InvalidArgument);      // negative timeout
  EXPECT_THROW(make({1, 0, -kInf, kInf, 1e300}), InvalidArgument);   // absurd timeout
  EXPECT_THROW(make({1, 0, -kInf, kInf, NAN}), InvalidArgument);
  EXPECT_NO_THROW(make({1, 0, -kInf, kInf, 0}));
  EXPECT_NO_THROW(make({10, 4, 40 - 8, 40 + 8, 60}));
}

TEST(RateLimiter, MinSizeHoldsSamplingUntilEnoughAreStored) {
  RateLimiter limiter({3, 0, -kInf, kInf, 1}, 10);
  EXPECT_FALSE(limiter.CanSample({2, 0, 2, 0}, 1));
  EXPECT_TRUE(limiter.CanSample({3, 0, 3, 0}, 1000));
  EXPECT_TRUE(limiter.CanInsert({9, 0, 9, 1e9}));
}

TEST(RateLimiter, SampleToInsertRatioKeepsTheDiffInItsBand) {
  // samples_per_insert 2, min_size 2, error_buffer 3: diff in [4 - 3, 4 + 3].
  RateLimiter limiter({2, 2, 1, 7, 1}, 10);
  LimiterState s{3, 0, 3, 0};              // diff = 6
  EXPECT_TRUE(limiter.CanSample(s, 5));    // 6 - 5 >= 1
  EXPECT_FALSE(limiter.CanSample(s, 6));   // 6 - 6 < 1
  EXPECT_FALSE(limiter.CanInsert(s));      // 4 * 2 - 0 > 7
  s.samples = 2;
  EXPECT_TRUE(limiter.CanInsert(s));       // 8 - 2 <= 7
  s.writers = 1;                           // an insert in flight counts
  EXPECT_FALSE(limiter.CanInsert(s));      // 10 - 2 > 7
  s = {1, 0, 1, 0};                        // below min_size: inserts always pass
  EXPECT_TRUE(limiter.CanInsert(s));
  EXPECT_FALSE(limiter.CanSample(s, 1));
  EXPECT_NE(limiter.Describe(s).find("samples_per_insert=2"), std::string::npos);
}

}  // namespace
}  // namespace gearjax
