// What a table tells the other shards of a sharded table (see table.h,
// sharding.h): strategy totals, its memory for one-sided readers, best lists.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "core/limits.h"
#include "core/prefetch.h"
#include "core/random.h"
#include "core/table/table.h"
#include "core/table/table_internal.h"

namespace gearjax {

StrategyTotals Table::Totals(const SampleRequest& r) {
  CheckRequest(r);
  MutexLock lock(CheckedMutex());
  CheckOpenLocked();
  OwnPrioritiesLocked();
  if (Ranks(r.strategy)) throw InvalidArgument("TopK and Recent have no totals to draw shards by");
  // With no positive priority, a draw by priority draws nothing here (as
  // Select refuses); asking for the tree then would only take an alpha's place.
  const double weight = WeighsByPriority(r) && PositiveLocked() == 0
                            ? 0.0
                            : SamplingSelectorLocked(r).TotalWeight();
  return {live_, num_steps_, weight};
}

RemoteLayout Table::Remote(const SampleRequest& r) {
  CheckRequest(r);
  MutexLock lock(CheckedMutex());
  CheckOpenLocked();
  OwnPrioritiesLocked();
  if (arena_->host_data() == nullptr) {
    throw InvalidArgument("a table in GPU memory cannot be read by other processes' hosts");
  }
  // TopK and Recent have none (readers rank the records and stamps), and
  // asking would make their selector here, for nothing.
  const SumTree* tree = Ranks(r.strategy) ? nullptr : SamplingSelectorLocked(r).DrawTree();
  RemoteLayout layout{arena_->host_data(), arena_->bytes(), &(*slots_)[0]};
  if (tree != nullptr) {
    layout.tree = tree->view();
    layout.tree_nodes = tree->node_count();
  }
  layout.stamps = stamps_.data();
  return layout;
}

StrategyTotals Table::Tops(const SampleRequest& r, TopEntry* out) {
  CheckRequest(r);
  if (!Ranks(r.strategy)) {
    throw InvalidArgument("only TopK and Recent rank their items");
  }
  MutexLock lock(CheckedMutex());
  CheckOpenLocked();
  OwnPrioritiesLocked();
  const std::vector<int64_t> slots = SamplingSelectorLocked(r).Best(r.count);
  for (size_t i = 0; i < slots.size(); ++i) {
    out[i] = {(*slots_)[slots[i]].priority, stamps_[slots[i]]};
  }
  return {live_, num_steps_, static_cast<double>(slots.size())};
}

}  // namespace gearjax
