// Tests of the strategy registry (strategies.h): one entry per code in code
// order, what ranks and what weighs by priority, the parameter checks and
// eligibility words that follow from each entry, and unknown codes refused.
#include "core/selectors/strategies.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "core/common.h"
#include "core/limits.h"

namespace gearjax {
namespace {

SampleRequest Request(Strategy s, double alpha = 0.0, int64_t count = 0) {
  SampleRequest r;
  r.strategy = s;
  r.alpha = alpha;
  r.count = count;
  r.batch = 1;
  return r;
}

TEST(Strategies, EveryCodeHasOneEntryWithAUniqueKeyAndName) {
  ASSERT_EQ(NumStrategies(), 6);
  std::set<std::string> keys, names;
  for (int64_t code = 0; code < NumStrategies(); ++code) {
    const StrategyEntry* entry = FindStrategy(code);
    ASSERT_NE(entry, nullptr);
    EXPECT_EQ(static_cast<int64_t>(entry->strategy), code);
    EXPECT_EQ(&StrategyOf(entry->strategy), entry);
    keys.insert(entry->key);
    names.insert(entry->name);
  }
  EXPECT_EQ(keys, (std::set<std::string>{"uniform", "timestep", "prioritized", "topk", "recent",
                                          "prioritizedsteps"}));
  EXPECT_EQ(names, (std::set<std::string>{"Uniform", "Timestep", "Prioritized", "TopK", "Recent",
                                           "PrioritizedSteps"}));
}

TEST(Strategies, UnknownCodesAreRefused) {
  for (int64_t code : {int64_t{-1}, NumStrategies(), int64_t{1} << 40,
                       std::numeric_limits<int64_t>::min()}) {
    EXPECT_EQ(FindStrategy(code), nullptr) << code;
  }
  const Strategy unknown = static_cast<Strategy>(7);
  EXPECT_THROW(StrategyOf(unknown), InvalidArgument);
  EXPECT_THROW(CheckParameters(Request(unknown)), InvalidArgument);
  EXPECT_THROW(EligibleWords(Request(unknown)), InvalidArgument);
  EXPECT_FALSE(Ranks(unknown));
  EXPECT_FALSE(WeighsByPriority(Request(unknown, 1.0)));
}

TEST(Strategies, OnlyTopKAndRecentRankAndOnlyPrioritizedWeighsByPriority) {
  EXPECT_FALSE(Ranks(Strategy::kPrioritizedSteps));
  EXPECT_TRUE(WeighsByPriority(Request(Strategy::kPrioritizedSteps, 0.6)));
  EXPECT_FALSE(WeighsByPriority(Request(Strategy::kPrioritizedSteps, 0.0)));
  EXPECT_THROW(CheckParameters(Request(Strategy::kPrioritizedSteps, 9.0)), InvalidArgument);
  // Only PrioritizedSteps draws steps (and so selects on the host).
  for (int64_t code = 0; code < NumStrategies(); ++code) {
    const auto s = static_cast<Strategy>(code);
    EXPECT_EQ(DrawsSteps(s), s == Strategy::kPrioritizedSteps);
  }
  EXPECT_FALSE(Ranks(Strategy::kUniform));
  EXPECT_FALSE(Ranks(Strategy::kTimestep));
  EXPECT_FALSE(Ranks(Strategy::kPrioritized));
  EXPECT_TRUE(Ranks(Strategy::kTopK));
  EXPECT_TRUE(Ranks(Strategy::kRecent));
  EXPECT_TRUE(WeighsByPriority(Request(Strategy::kPrioritized, 0.6)));
  EXPECT_FALSE(WeighsByPriority(Request(Strategy::kPrioritized, 0.0)));  // uniform
  // An alpha given with another strategy means nothing.
  for (Strategy s : {Strategy::kUniform, Strategy::kTimestep, Strategy::kTopK, Strategy::kRecent}) {
    EXPECT_FALSE(WeighsByPriority(Request(s, 1.0, 3)));
  }
}

TEST(Strategies, EachChecksItsOwnParameters) {
  const double nan = std::nan("");
  for (double alpha : {-0.1, 8.01, nan, std::numeric_limits<double>::infinity(),
                       std::numeric_limits<double>::denorm_min(), kMinPriority / 2}) {
    EXPECT_THROW(CheckParameters(Request(Strategy::kPrioritized, alpha)),
                 InvalidArgument)
        << alpha;
  }
  EXPECT_NO_THROW(CheckParameters(Request(Strategy::kPrioritized, 0.0)));
  EXPECT_NO_THROW(CheckParameters(Request(Strategy::kPrioritized, 8.0)));
  EXPECT_NO_THROW(CheckParameters(Request(Strategy::kPrioritizedSteps, kMinPriority)));
  EXPECT_THROW(CheckParameters(Request(Strategy::kPrioritizedSteps, kMinPriority / 4)),
               InvalidArgument);
  for (Strategy s : {Strategy::kTopK, Strategy::kRecent}) {
    EXPECT_THROW(CheckParameters(Request(s, 0.0, 0)), InvalidArgument);
    EXPECT_THROW(CheckParameters(Request(s, 0.0, -5)), InvalidArgument);
    EXPECT_NO_THROW(CheckParameters(Request(s, 0.0, 1)));
  }
  // Parameters of other strategies are not theirs to check.
  for (Strategy s : {Strategy::kUniform, Strategy::kTimestep}) {
    EXPECT_NO_THROW(CheckParameters(Request(s, nan, -1)));
  }
}

TEST(Strategies, EligibilityWordsNameWhatAnItemNeeds) {
  EXPECT_EQ(EligibleWords(Request(Strategy::kUniform)), "");
  EXPECT_EQ(EligibleWords(Request(Strategy::kTimestep)), "");
  EXPECT_EQ(EligibleWords(Request(Strategy::kPrioritized, 0.5)),
            " with priority > 0");
  EXPECT_EQ(EligibleWords(Request(Strategy::kPrioritized, 0.0)), "");
  SampleRequest steps = Request(Strategy::kPrioritizedSteps, 0.5);
  EXPECT_EQ(EligibleWords(steps), " with a step of priority > 0");
  steps.cut = Cut::kFull;
  EXPECT_EQ(EligibleWords(steps), " with a step of priority > 0 where a full window starts");
  EXPECT_EQ(EligibleWords(Request(Strategy::kTopK, 0, 7)),
            " among the TopK 7");
  EXPECT_EQ(EligibleWords(Request(Strategy::kRecent, 0, 3)),
            " among the Recent 3");
}

}  // namespace
}  // namespace gearjax
