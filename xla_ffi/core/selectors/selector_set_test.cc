// Tests of the selector set (selector_set.h): each strategy's selector made by
// the registry's factory, found again by (strategy, alpha) only once kept;
// one per alpha for the strategies that weigh by priority, at most
// kMaxPriorityTrees, the next refused naming the alphas kept; PrioritizedSteps
// refused on a table without step priorities; every selector in all(), those
// that keep priorities in using_priority(); and TakeAll leaving it empty.
#include "core/selectors/selector_set.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/common.h"
#include "core/limits.h"
#include "core/selectors/fifo.h"
#include "core/selectors/prioritized.h"
#include "core/selectors/recent.h"
#include "core/selectors/step_prioritized.h"
#include "core/selectors/timestep.h"
#include "core/selectors/topk.h"
#include "core/selectors/uniform.h"
#include "core/table/slots.h"

namespace gearjax {
namespace {

constexpr int64_t kCapacity = 8;
constexpr int64_t kMaxLength = 4;

class SelectorSetTest : public ::testing::Test {
 protected:
  SelectorContext Context(bool step_priorities) {
    return {kCapacity, kMaxLength, /*gpu_mapped=*/false,
            step_priorities ? steps_.data() : nullptr, slots_.data()};
  }
  SamplingSelector& MakeAndAdd(Strategy strategy, double alpha, bool step_priorities = false) {
    return set_.Add(strategy, alpha, set_.Make(strategy, alpha, Context(step_priorities)));
  }

  std::vector<double> steps_ = std::vector<double>(kCapacity * kMaxLength, 0.0);
  std::vector<SlotInfo> slots_ = std::vector<SlotInfo>(kCapacity, SlotInfo{});
  SelectorSet set_;
};

TEST_F(SelectorSetTest, EachStrategysFactoryMakesItsOwnSelector) {
  for (int64_t code = 0; code < NumStrategies(); ++code) {
    const Strategy strategy = FindStrategy(code)->strategy;
    std::unique_ptr<SamplingSelector> made = set_.Make(strategy, 0.5, Context(true));
    ASSERT_NE(made, nullptr) << code;
    SamplingSelector* raw = made.get();
    switch (strategy) {
      case Strategy::kUniform: EXPECT_NE(dynamic_cast<UniformSelector*>(raw), nullptr); break;
      case Strategy::kTimestep: EXPECT_NE(dynamic_cast<TimestepSelector*>(raw), nullptr); break;
      case Strategy::kPrioritized:
        ASSERT_NE(dynamic_cast<PrioritizedSelector*>(raw), nullptr);
        EXPECT_EQ(dynamic_cast<PrioritizedSelector*>(raw)->alpha(), 0.5);
        break;
      case Strategy::kTopK: EXPECT_NE(dynamic_cast<TopKSelector*>(raw), nullptr); break;
      case Strategy::kRecent: EXPECT_NE(dynamic_cast<RecentSelector*>(raw), nullptr); break;
      case Strategy::kPrioritizedSteps:
        ASSERT_NE(dynamic_cast<StepPrioritizedSelector*>(raw), nullptr);
        EXPECT_EQ(dynamic_cast<StepPrioritizedSelector*>(raw)->alpha(), 0.5);
        break;
    }
    // Made, not kept.
    EXPECT_EQ(set_.Find(strategy, 0.5), nullptr) << code;
  }
  EXPECT_TRUE(set_.all().empty());
}

TEST_F(SelectorSetTest, FoundAgainByStrategyAndAlphaOnlyWhereAlphaWeighs) {
  SamplingSelector& uniform = MakeAndAdd(Strategy::kUniform, 0.0);
  EXPECT_EQ(set_.Find(Strategy::kUniform, 0.0), &uniform);
  EXPECT_EQ(set_.Find(Strategy::kUniform, 0.7), &uniform);  // Uniform has no alpha
  EXPECT_EQ(set_.Find(Strategy::kTimestep, 0.0), nullptr);

  SamplingSelector& low = MakeAndAdd(Strategy::kPrioritized, 0.3);
  SamplingSelector& high = MakeAndAdd(Strategy::kPrioritized, 0.9);
  EXPECT_EQ(set_.Find(Strategy::kPrioritized, 0.3), &low);
  EXPECT_EQ(set_.Find(Strategy::kPrioritized, 0.9), &high);
  EXPECT_EQ(set_.Find(Strategy::kPrioritized, 0.6), nullptr);
  EXPECT_EQ(set_.Find(Strategy::kPrioritizedSteps, 0.3), nullptr);  // another strategy's

  std::vector<double> alphas;
  for (const PrioritizedSelector* p : set_.Of<PrioritizedSelector>(Strategy::kPrioritized)) {
    alphas.push_back(p->alpha());
  }
  EXPECT_EQ(alphas, (std::vector<double>{0.3, 0.9}));  // in the order made
  EXPECT_EQ(set_.CountOf(Strategy::kPrioritized), 2u);
  EXPECT_TRUE(set_.Has(Strategy::kPrioritized));
  EXPECT_FALSE(set_.Has(Strategy::kTopK));
  EXPECT_TRUE(set_.Holds(Strategy::kPrioritized, &high));
  EXPECT_FALSE(set_.Holds(Strategy::kPrioritized, &uniform));
  EXPECT_FALSE(set_.Holds(Strategy::kPrioritizedSteps, &high));
}

TEST_F(SelectorSetTest, RefusesOneAlphaTooManyNamingThoseKept) {
  for (int i = 0; i < kMaxPriorityTrees; ++i) MakeAndAdd(Strategy::kPrioritized, 0.125 * (i + 1));
  try {
    set_.Make(Strategy::kPrioritized, 2.0, Context(false));
    FAIL() << "one alpha too many was made";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("at most " + std::to_string(kMaxPriorityTrees) + " Prioritized alphas"),
              std::string::npos) << message;
    EXPECT_NE(message.find("0.125, 0.25"), std::string::npos) << message;
    EXPECT_NE(message.find("Prioritized(2) would be one more"), std::string::npos) << message;
  }
  // Each strategy counts its own; the kept alphas are still found.
  EXPECT_NO_THROW(MakeAndAdd(Strategy::kPrioritizedSteps, 2.0, /*step_priorities=*/true));
  EXPECT_NE(set_.Find(Strategy::kPrioritized, 0.125), nullptr);
  EXPECT_EQ(set_.CountOf(Strategy::kPrioritized), static_cast<size_t>(kMaxPriorityTrees));
}

TEST_F(SelectorSetTest, PrioritizedStepsNeedsAStepPriorityTable) {
  try {
    set_.Make(Strategy::kPrioritizedSteps, 1.0, Context(false));
    FAIL() << "PrioritizedSteps made without step priorities";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("step_priorities=True"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(set_.Has(Strategy::kPrioritizedSteps));
}

TEST_F(SelectorSetTest, UnknownStrategyIsRefused) {
  EXPECT_THROW(set_.Find(static_cast<Strategy>(NumStrategies()), 0.0), InvalidArgument);
  EXPECT_THROW(set_.Make(static_cast<Strategy>(-1), 0.0, Context(false)), InvalidArgument);
}

TEST_F(SelectorSetTest, EverySelectorIsToldThroughAllAndTakeAllEmptiesIt) {
  InsertionOrder& order = set_.Keep(std::make_unique<InsertionOrder>(kCapacity));
  SamplingSelector& uniform = MakeAndAdd(Strategy::kUniform, 0.0);
  SamplingSelector& prioritized = MakeAndAdd(Strategy::kPrioritized, 1.0);
  SamplingSelector& topk = MakeAndAdd(Strategy::kTopK, 0.0);
  EXPECT_EQ(set_.all(), (std::vector<Selector*>{&order, &uniform, &prioritized, &topk}));
  EXPECT_EQ(set_.using_priority(), (std::vector<Selector*>{&prioritized, &topk}));

  // What all() lists is what the table tells: an item inserted through it
  // is drawable from each sampling selector.
  for (Selector* selector : set_.all()) selector->Insert({3, 42, 2, 1.5});
  EXPECT_EQ(order.Oldest(), 3);
  EXPECT_DOUBLE_EQ(prioritized.TotalWeight(), 1.5);
  EXPECT_EQ(topk.Best(1), (std::vector<int64_t>{3}));

  const std::vector<std::shared_ptr<void>> taken = set_.TakeAll();
  EXPECT_EQ(taken.size(), 4u);
  EXPECT_EQ(taken.front().get(), static_cast<void*>(static_cast<Selector*>(&topk)));  // last first
  EXPECT_TRUE(set_.all().empty());
  EXPECT_TRUE(set_.using_priority().empty());
  EXPECT_FALSE(set_.Has(Strategy::kPrioritized));
  EXPECT_EQ(set_.Find(Strategy::kUniform, 0.0), nullptr);
}

}  // namespace
}  // namespace gearjax
