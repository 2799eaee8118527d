// The registry of sampling strategies (see strategies.h).
#include "strategies.h"

#include <charconv>
#include <iterator>
#include <string>

#include "common.h"
#include "limits.h"

namespace gearjax {
namespace {

std::string Shortest(double v) {
  char buffer[32];
  const std::to_chars_result end = std::to_chars(buffer, buffer + sizeof(buffer), v);
  return std::string(buffer, end.ptr);
}

void NoParameters(const SampleRequest&) {}

void CheckAlpha(const SampleRequest& r) {
  if (!(r.alpha >= 0 && r.alpha <= kMaxAlpha)) {
    throw InvalidArgument("Prioritized alpha must be in [0, 8], got " + Shortest(r.alpha));
  }
}

void CheckCount(const SampleRequest& r) {
  if (r.count < 1) throw InvalidArgument("TopK and Recent need a count >= 1");
}

std::string AnyItem(const SampleRequest&) { return ""; }

std::string PositivePriority(const SampleRequest& r) {
  return WeighsByPriority(r) ? " with priority > 0" : "";
}

std::string AmongTopK(const SampleRequest& r) {
  return " among the TopK " + std::to_string(r.count);
}

std::string AmongRecent(const SampleRequest& r) {
  return " among the Recent " + std::to_string(r.count);
}

constexpr StrategyEntry kStrategies[] = {
    // strategy, key, name, ranks, weighs_by_priority, check, eligible
    {Strategy::kUniform, "uniform", "Uniform", false, false, NoParameters, AnyItem},
    {Strategy::kTimestep, "timestep", "Timestep", false, false, NoParameters, AnyItem},
    {Strategy::kPrioritized, "prioritized", "Prioritized", false, true, CheckAlpha,
     PositivePriority},
    {Strategy::kTopK, "topk", "TopK", true, false, CheckCount, AmongTopK},
    {Strategy::kRecent, "recent", "Recent", true, false, CheckCount, AmongRecent},
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

}  // namespace gearjax
