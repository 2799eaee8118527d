// The global order of TopK and Recent over the shards of a sharded table:
// one definition for the exchanges that merge best lists (sharding.h
// RankShards) and the one-sided sampler that ranks slot records it read
// (one_sided_ranked.cc). Higher priority first (TopK only; Recent ranks with
// priority 0), then the newer insertion stamp, then the higher shard number.
#pragma once

#include <cstdint>

#include "core/sample_request.h"

namespace gearjax {

struct RankedItem {
  double priority;  // 0 for Recent
  int64_t stamp;
  int64_t shard;

  // Whether this item ranks above `o`.
  bool operator>(const RankedItem& o) const {
    if (priority != o.priority) return priority > o.priority;
    if (stamp != o.stamp) return stamp > o.stamp;
    return shard > o.shard;
  }
};

// Whether a ranking strategy orders by priority before stamp (TopK) or by
// stamp alone (Recent, whose items rank with priority 0).
inline bool RanksByPriority(Strategy strategy) { return strategy == Strategy::kTopK; }

}  // namespace gearjax
