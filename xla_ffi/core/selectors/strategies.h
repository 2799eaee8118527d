// The sampling strategies users choose, registered once: each one's code,
// name, how it draws (ranks, or weighs by priority), from which its
// parameter checks and the words naming what makes an item eligible follow,
// and the factory that makes its selector. Adding a strategy: an enum value
// (sample_request.h), an entry here with its factory, its selector
// (selectors/), its Python class (gearjax/strategies.py). The table keeps the
// selectors the factories make in a SelectorSet (selector_set.h); its checks
// and messages, the sharded plan and the bindings read this registry instead
// of switching on the strategy (the places that still name strategies, as
// optimisations, are listed in docs/internals.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/sample_request.h"

namespace gearjax {

class SamplingSelector;  // selector.h
struct SlotInfo;         // slots.h

// What a strategy's selector is made from: the table's shape, and the state
// of the table it reads (never writes) and that outlives it.
struct SelectorContext {
  int64_t capacity;
  int64_t max_length;
  // Its trees in GPU-mapped pinned memory (TableSpec::gpu_mapped), which GPU
  // selection kernels descend.
  bool gpu_mapped;
  // The table's step priorities, max_length a slot; null where the table
  // keeps none (TableSpec::step_priorities).
  const double* step_priorities;
  const SlotInfo* slots;  // the slot records, capacity of them
};

// Makes a strategy's selector, empty, for `alpha` (ignored by strategies that
// do not weigh by priority); throws InvalidArgument where the table cannot
// serve the strategy.
using SelectorFactory = std::unique_ptr<SamplingSelector> (*)(const SelectorContext& context,
                                                              double alpha);

struct StrategyEntry {
  Strategy strategy;
  // As the bindings export it and Python names it (gearjax._checks
  // STRATEGY_CODES): the class name, lower-case.
  const char* key;
  const char* name;  // the Python class, for messages
  // Draws among the best `count` items it ranks (no weights, no sum tree):
  // selected on the host; a sharded sample merges best lists, not totals.
  bool ranks;
  // Draws in proportion to priority ** alpha (Prioritized): with alpha > 0,
  // only items of priority > 0 can be drawn (see WeighsByPriority).
  bool weighs_by_priority;
  // Draws a step of a trajectory, which places the window, rather than a
  // trajectory (PrioritizedSteps, on tables that keep a priority per step):
  // selected on the host.
  bool draws_steps;
  // Makes its selector. Strategies that weigh by priority get one per alpha
  // (at most kMaxPriorityTrees), the others one.
  SelectorFactory make;
};

// How many strategies are registered: their codes are 0 .. count - 1.
int64_t NumStrategies();

// The entry of `code`, or null where no strategy has that code.
const StrategyEntry* FindStrategy(int64_t code);

// Whether `strategy` ranks (StrategyEntry::ranks); false for an unknown one.
bool Ranks(Strategy strategy);

// Whether `strategy` draws steps (StrategyEntry::draws_steps); false for an
// unknown one.
bool DrawsSteps(Strategy strategy);

// Whether the request draws by priorities with alpha > 0: what a priority
// update changes, and what a table whose priorities are all 0 cannot serve.
// False for an unknown strategy.
bool WeighsByPriority(const SampleRequest& request);

// The entry of `strategy`; throws InvalidArgument for an unknown one (a
// value cast from a caller's integer).
const StrategyEntry& StrategyOf(Strategy strategy);

// Throws InvalidArgument for an unknown strategy or parameters it refuses
// (a ranking one's count < 1, a priority-weighing one's alpha outside
// [0, kMaxAlpha] or subnormal).
void CheckParameters(const SampleRequest& request);

// What an item needs besides the request's cut to be drawn, as words a
// shortfall message appends: " among the TopK 5", " with priority > 0", or
// "" when any live item may be.
std::string EligibleWords(const SampleRequest& request);

}  // namespace gearjax
