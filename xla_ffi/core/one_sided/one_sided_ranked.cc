// The one-sided draw of TopK and Recent (one_sided_draw.h; steps 1 and 2 of
// one_sided.h): every shard's slot records and insertion stamps in one read
// (marked fixed), the live items ranked here in the global order
// (shard_ranking.h), each row uniformly among the `count` best. The records
// read are the rows' records before their windows.
#include <algorithm>
#include <functional>

#include "core/common.h"
#include "core/limits.h"
#include "core/one_sided/one_sided_draw.h"
#include "core/sharding/shard_ranking.h"

namespace gearjax::one_sided {

Drawn DrawRanked(Reads& reads, const Request& request, const std::vector<int64_t>& todo,
                 int round) {
  const std::vector<ShardLayout>& shards = reads.shards();
  const size_t S = shards.size();
  std::vector<ShardSpans> spans;
  size_t bytes = 0;
  for (size_t k = 0; k < S; ++k) {
    const uint64_t n = static_cast<uint64_t>(shards[k].capacity);
    ShardSpans s{static_cast<int>(k), {shards[k].slots, shards[k].stamps}, {bytes,
                 bytes + n * sizeof(SlotInfo)}, {n * sizeof(SlotInfo), n * sizeof(int64_t)}};
    bytes += n * (sizeof(SlotInfo) + sizeof(int64_t));
    spans.push_back(std::move(s));
  }
  reads.Stage(kSnapshotStaging, bytes, spans);
  reads.Read(spans, /*fixed=*/true);
  const bool by_priority = RanksByPriority(request.strategy);
  struct Item {
    RankedItem rank;
    int64_t slot;
  };
  std::vector<Item> live;
  for (size_t k = 0; k < S; ++k) {
    const auto* records = reinterpret_cast<const SlotInfo*>(spans[k].local[0]);
    const auto* stamps = reinterpret_cast<const int64_t*>(spans[k].local[1]);
    for (int64_t slot = 0; slot < shards[k].capacity; ++slot) {
      if (records[slot].state != SlotState::kLive) continue;
      const double priority = by_priority ? records[slot].priority : 0.0;
      // Owners store only valid priorities; anything else is a record read
      // while it changed (its row would fail the record check anyway), and
      // would break the order the sort needs.
      if (!ValidPriority(priority)) continue;
      live.push_back({{priority, stamps[slot], static_cast<int64_t>(k)}, slot});
    }
  }
  const size_t best = static_cast<size_t>(
      std::min<int64_t>(request.count, static_cast<int64_t>(live.size())));
  if (best == 0) throw InvalidArgument("cannot sample: every shard is empty");
  std::partial_sort(live.begin(), live.begin() + static_cast<std::ptrdiff_t>(best), live.end(),
                    [](const Item& a, const Item& b) { return a.rank > b.rank; });
  Drawn d(S);
  d.total = static_cast<double>(best);
  d.table_size = static_cast<int64_t>(live.size());
  for (int64_t row : todo) {
    const Words4 w = AttemptWords(request.seed, row, static_cast<uint32_t>(2 * round));
    const Item& item = live[BelowFromBits(w.w[0], w.w[1], best)];
    const size_t k = static_cast<size_t>(item.rank.shard);
    d.rows[k].push_back(row);
    d.slot[k].push_back(item.slot);
    d.step[k].push_back(-1);  // the window's start is drawn from start_words
    d.weight[k].push_back(1.0);
    d.before[k].push_back(reinterpret_cast<const SlotInfo*>(spans[k].local[0])[item.slot]);
    d.start_words[k].push_back(
        AttemptWords(request.seed, row, static_cast<uint32_t>(2 * round + 1)));
  }
  return d;
}

}  // namespace gearjax::one_sided
