// The registry of sampling strategies (see strategies.h).
#include "core/selectors/strategies.h"

#include <iterator>
#include <memory>
#include <string>

#include "core/common.h"
#include "core/limits.h"
#include "core/selectors/prioritized.h"
#include "core/selectors/recent.h"
#include "core/selectors/step_prioritized.h"
#include "core/selectors/timestep.h"
#include "core/selectors/topk.h"
#include "core/selectors/uniform.h"
#include "core/table/table_internal.h"  // Number

namespace gearjax {
namespace {

// Each strategy's selector factory (SelectorFactory).
std::unique_ptr<SamplingSelector> MakeUniform(const SelectorContext& c, double) {
  return std::make_unique<UniformSelector>(c.capacity, c.gpu_mapped);
}
std::unique_ptr<SamplingSelector> MakeTimestep(const SelectorContext& c, double) {
  return std::make_unique<TimestepSelector>(c.capacity, c.gpu_mapped);
}
std::unique_ptr<SamplingSelector> MakePrioritized(const SelectorContext& c, double alpha) {
  return std::make_unique<PrioritizedSelector>(alpha, c.capacity, c.gpu_mapped);
}
std::unique_ptr<SamplingSelector> MakeTopK(const SelectorContext&, double) {
  return std::make_unique<TopKSelector>();
}
std::unique_ptr<SamplingSelector> MakeRecent(const SelectorContext&, double) {
  return std::make_unique<RecentSelector>();
}
std::unique_ptr<SamplingSelector> MakePrioritizedSteps(const SelectorContext& c, double alpha) {
  if (c.step_priorities == nullptr) {
    throw InvalidArgument("PrioritizedSteps draws steps by their own priorities: make the table "
                          "with step_priorities=True");
  }
  return std::make_unique<StepPrioritizedSelector>(alpha, c.capacity, c.max_length,
                                                   c.step_priorities, c.slots, c.gpu_mapped);
}

constexpr StrategyEntry kStrategies[] = {
    // strategy, key, name, ranks, weighs_by_priority, draws_steps, make
    {Strategy::kUniform, "uniform", "Uniform", false, false, false, MakeUniform},
    {Strategy::kTimestep, "timestep", "Timestep", false, false, false, MakeTimestep},
    {Strategy::kPrioritized, "prioritized", "Prioritized", false, true, false, MakePrioritized},
    {Strategy::kTopK, "topk", "TopK", true, false, false, MakeTopK},
    {Strategy::kRecent, "recent", "Recent", true, false, false, MakeRecent},
    {Strategy::kPrioritizedSteps, "prioritizedsteps", "PrioritizedSteps", false, true, true,
     MakePrioritizedSteps},
};

constexpr bool InCodeOrder() {
  for (size_t i = 0; i < std::size(kStrategies); ++i) {
    if (static_cast<size_t>(kStrategies[i].strategy) != i) return false;
  }
  return true;
}
static_assert(InCodeOrder(), "kStrategies: entry i must hold the strategy of code i");

}  // namespace

int64_t NumStrategies() { return static_cast<int64_t>(std::size(kStrategies)); }

const StrategyEntry* FindStrategy(int64_t code) {
  if (code < 0 || code >= NumStrategies()) return nullptr;
  return &kStrategies[code];
}

bool Ranks(Strategy strategy) {
  const StrategyEntry* entry = FindStrategy(static_cast<int64_t>(strategy));
  return entry != nullptr && entry->ranks;
}

bool DrawsSteps(Strategy strategy) {
  const StrategyEntry* entry = FindStrategy(static_cast<int64_t>(strategy));
  return entry != nullptr && entry->draws_steps;
}

bool WeighsByPriority(const SampleRequest& request) {
  const StrategyEntry* entry = FindStrategy(static_cast<int64_t>(request.strategy));
  return entry != nullptr && entry->weighs_by_priority && request.alpha > 0;
}

const StrategyEntry& StrategyOf(Strategy strategy) {
  const StrategyEntry* entry = FindStrategy(static_cast<int64_t>(strategy));
  if (entry == nullptr) {
    throw InvalidArgument("unknown sampling strategy " +
                          std::to_string(static_cast<int32_t>(strategy)));
  }
  return *entry;
}

void CheckParameters(const SampleRequest& r) {
  const StrategyEntry& entry = StrategyOf(r.strategy);
  if (entry.ranks && r.count < 1) throw InvalidArgument("TopK and Recent need a count >= 1");
  if (entry.weighs_by_priority && !(r.alpha >= 0 && r.alpha <= kMaxAlpha)) {
    throw InvalidArgument(std::string(entry.name) + " alpha must be in [0, 8], got " +
                          table_internal::Number(r.alpha));
  }
  // A subnormal alpha reads as 0 on threads that treat subnormal inputs as
  // zero (XLA's), where priority 0 would weigh 1, and as itself elsewhere,
  // where it weighs 0: refused, as priorities are.
  if (entry.weighs_by_priority && IsSubnormal(r.alpha)) {
    throw InvalidArgument(std::string(entry.name) + " alpha must be 0 or at least " +
                          table_internal::Number(kMinPriority) + " (not subnormal), got " +
                          table_internal::Number(r.alpha));
  }
}

std::string EligibleWords(const SampleRequest& r) {
  const StrategyEntry& entry = StrategyOf(r.strategy);
  if (entry.ranks) return std::string(" among the ") + entry.name + " " + std::to_string(r.count);
  if (!WeighsByPriority(r)) return "";
  if (!entry.draws_steps) return " with priority > 0";
  return r.cut == Cut::kFull ? " with a step of priority > 0 where a full window starts"
                             : " with a step of priority > 0";
}

}  // namespace gearjax
