// The registry of sampling strategies (see strategies.h).
#include "core/selectors/strategies.h"

#include <iterator>
#include <string>

#include "core/common.h"
#include "core/limits.h"
#include "core/table/table_internal.h"  // Number

namespace gearjax {
namespace {

constexpr StrategyEntry kStrategies[] = {
    // strategy, key, name, ranks, weighs_by_priority, draws_steps
    {Strategy::kUniform, "uniform", "Uniform", false, false, false},
    {Strategy::kTimestep, "timestep", "Timestep", false, false, false},
    {Strategy::kPrioritized, "prioritized", "Prioritized", false, true, false},
    {Strategy::kTopK, "topk", "TopK", true, false, false},
    {Strategy::kRecent, "recent", "Recent", true, false, false},
    {Strategy::kPrioritizedSteps, "prioritizedsteps", "PrioritizedSteps", false, true, true},
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
}

std::string EligibleWords(const SampleRequest& r) {
  const StrategyEntry& entry = StrategyOf(r.strategy);
  if (entry.ranks) return std::string(" among the ") + entry.name + " " + std::to_string(r.count);
  return WeighsByPriority(r) ? " with priority > 0" : "";
}

}  // namespace gearjax
