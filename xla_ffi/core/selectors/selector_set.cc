// The selectors a table keeps (see selector_set.h).
#include "core/selectors/selector_set.h"

#include <algorithm>
#include <string>

#include "core/common.h"
#include "core/limits.h"
#include "core/table/table_internal.h"  // Number

namespace gearjax {

SelectorSet::SelectorSet()
    : made_(static_cast<size_t>(NumStrategies())), keys_(static_cast<size_t>(NumStrategies())) {}

SamplingSelector* SelectorSet::Find(Strategy strategy, double alpha) const {
  const double key = KeyOf(StrategyOf(strategy), alpha);
  const std::vector<double>& keys = keys_[Index(strategy)];
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i] == key) return made_[Index(strategy)][i];
  }
  return nullptr;
}

std::unique_ptr<SamplingSelector> SelectorSet::Make(Strategy strategy, double alpha,
                                                    const SelectorContext& context) const {
  const StrategyEntry& entry = StrategyOf(strategy);
  const std::vector<double>& keys = keys_[Index(strategy)];
  if (entry.weighs_by_priority && keys.size() >= static_cast<size_t>(kMaxPriorityTrees)) {
    std::string alphas;
    for (const double kept : keys) {
      alphas += (alphas.empty() ? "" : ", ") + table_internal::Number(kept);
    }
    throw InvalidArgument("a table keeps sum trees for at most " +
                          std::to_string(kMaxPriorityTrees) + " " + entry.name +
                          " alphas (this one has " + alphas + "); " + entry.name + "(" +
                          table_internal::Number(alpha) + ") would be one more");
  }
  return entry.make(context, KeyOf(entry, alpha));
}

SamplingSelector& SelectorSet::Add(Strategy strategy, double alpha,
                                   std::unique_ptr<SamplingSelector> selector) {
  SamplingSelector& kept = *selector;
  made_[Index(strategy)].push_back(&kept);
  keys_[Index(strategy)].push_back(KeyOf(StrategyOf(strategy), alpha));
  Own(std::move(selector));
  return kept;
}

bool SelectorSet::Holds(Strategy strategy, const Selector* selector) const {
  const std::vector<SamplingSelector*>& made = made_[Index(strategy)];
  return std::find(made.begin(), made.end(), selector) != made.end();
}

void SelectorSet::Own(std::unique_ptr<Selector> selector) {
  all_.push_back(selector.get());
  if (selector->UsesPriority()) using_priority_.push_back(selector.get());
  owned_.push_back(std::move(selector));
}

std::vector<std::shared_ptr<void>> SelectorSet::TakeAll() {
  std::vector<std::shared_ptr<void>> taken;
  for (auto it = owned_.rbegin(); it != owned_.rend(); ++it) {
    taken.emplace_back(std::shared_ptr<Selector>(std::move(*it)));
  }
  owned_.clear();
  for (auto& made : made_) made.clear();
  for (auto& keys : keys_) keys.clear();
  all_.clear();
  using_priority_.clear();
  return taken;
}

}  // namespace gearjax
