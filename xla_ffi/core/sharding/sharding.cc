// Global sampling over shards (see sharding.h).
#include "core/sharding/sharding.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/random.h"
#include "core/row_words_cpu.h"
#include "core/sharding/shard_ranking.h"

namespace gearjax {

ShardSummary Summarize(int64_t shard, const StrategyTotals& totals) {
  return {static_cast<double>(shard), static_cast<double>(totals.size),
          static_cast<double>(totals.num_steps), totals.weight};
}

SampleRequest ShardRequest(int64_t strategy, double alpha, int64_t count) {
  if (FindStrategy(strategy) == nullptr) {
    throw InvalidArgument("unknown sampling strategy " + std::to_string(strategy));
  }
  if (count < 1) throw InvalidArgument("TopK and Recent need a count >= 1");
  SampleRequest request;
  request.strategy = static_cast<Strategy>(strategy);
  request.alpha = alpha;
  request.count = count;
  request.batch = 1;
  // A strategy that places its window at a drawn step is a request only
  // with a window; a shard's total (all of its steps' weights, cut="start")
  // does not depend on the window's width.
  if (DrawsSteps(request.strategy)) request.window = 1;
  return request;
}

void RankShards(Strategy strategy, int64_t count, const TopEntry* entries, int64_t per_shard,
                ShardSummary* summaries, int64_t shards) {
  CheckSummaries(summaries, shards);
  if (!Ranks(strategy)) throw InvalidArgument("only TopK and Recent rank shards");
  if (count < 1 || per_shard < 1) throw InvalidArgument("TopK and Recent need a count >= 1");
  const bool by_priority = RanksByPriority(strategy);
  std::vector<RankedItem> all;  // in the global order (shard_ranking.h)
  for (int64_t m = 0; m < shards; ++m) {
    const TopEntry* list = entries + m * per_shard;
    int64_t n = 0;
    while (n < per_shard && list[n].stamp != -1) ++n;
    for (int64_t i = 0; i < per_shard; ++i) {
      const TopEntry& e = list[i];
      const bool padding = i >= n;
      const bool bad =
          padding ? e.stamp != -1
                  : (e.stamp < 0 || e.stamp >= kMaxStamp || (by_priority && !ValidPriority(e.priority)) ||
                     (i > 0 && !(RankedItem{by_priority ? list[i - 1].priority : 0.0, list[i - 1].stamp, m} >
                                 RankedItem{by_priority ? e.priority : 0.0, e.stamp, m})));
      if (bad) {
        throw InvalidArgument("shard " + std::to_string(m) + " sent a malformed best list (entry " +
                              std::to_string(i) + ")");
      }
      if (!padding) all.push_back({by_priority ? e.priority : 0.0, e.stamp, m});
    }
    summaries[m].weight = 0;
  }
  const size_t best = static_cast<size_t>(std::min<int64_t>(count, static_cast<int64_t>(all.size())));
  std::nth_element(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(best) -
                                    (best > 0 ? 1 : 0),
                   all.end(), std::greater<RankedItem>());
  for (size_t i = 0; i < best; ++i) summaries[all[i].shard].weight += 1;
}

void CheckSummaries(const ShardSummary* summaries, int64_t shards) {
  if (shards < 1) throw InvalidArgument("a sharded sample needs at least one shard");
  for (int64_t k = 0; k < shards; ++k) {
    const ShardSummary& s = summaries[k];
    if (s.shard != static_cast<double>(k)) {
      throw InvalidArgument(
          "the gathered shard summaries are not one per shard in order (entry " +
          std::to_string(k) + " describes shard " + std::to_string(s.shard) +
          "): the program's collectives did not reach every process's shard. Sample a "
          "ShardedTable inside shard_map over a mesh with one device per process, with "
          "axis_name naming that mesh axis, or call it eagerly");
    }
    for (double v : {s.size, s.num_steps, s.weight}) {
      if (!(v >= 0) || !std::isfinite(v)) {
        throw InvalidArgument("shard " + std::to_string(k) + " sent a malformed summary");
      }
    }
  }
}

namespace {

// The index of the first of the n non-decreasing values at `values` that is
// above `target` (n if none): std::upper_bound without branches on the data,
// which a random target would mispredict at every step.
int64_t FirstAbove(const double* values, int64_t n, double target) {
  if (n == 0) return 0;
  const double* base = values;
  while (n > 1) {
    const int64_t half = n / 2;
    // Arithmetic on the comparison, not a conditional: compilers turn
    // conditionals on a loaded value into branches.
    base += half * static_cast<int64_t>(base[half - 1] <= target);
    n -= half;
  }
  return (base - values) + (*base <= target);
}

}  // namespace

void PlanShards(const ShardSummary* summaries, int64_t shards, const uint32_t seed[2],
                int64_t batch, int32_t* shard_of_row, int32_t* rank_in_shard,
                int32_t* counts) {
  CheckSummaries(summaries, shards);
  double total = 0;
  int64_t last_drawable = -1;
  for (int64_t k = 0; k < shards; ++k) {
    total += summaries[k].weight;
    if (summaries[k].weight > 0) last_drawable = k;
    counts[k] = 0;
  }
  if (last_drawable < 0) {
    throw InvalidArgument("cannot sample: no shard holds anything this strategy can draw "
                          "(every shard is empty, or every priority is 0)");
  }
  // Cumulative weights, summed once in shard order (the very sums a scan from
  // shard 0 forms), then searched per row: O(log P) a row instead of O(P),
  // which made the plan every device draws for every process cost O(P^2 B).
  thread_local std::vector<double> cumulative;
  thread_local std::vector<Words4> words;
  cumulative.resize(static_cast<size_t>(last_drawable + 1));
  double sum = 0;
  for (int64_t k = 0; k <= last_drawable; ++k) cumulative[k] = sum += summaries[k].weight;
  const double* first = cumulative.data();
  const double* last = first + last_drawable;  // the last shard with weight
  constexpr int64_t kRowsAtOnce = 256;  // the batch's random words, a block at a time
  words.resize(static_cast<size_t>(std::min(batch, kRowsAtOnce)));
  for (int64_t begin = 0; begin < batch; begin += kRowsAtOnce) {
    const int64_t rows = std::min(kRowsAtOnce, batch - begin);
    RowWordsMany(seed, begin, rows, words.data());
    for (int64_t i = 0; i < rows; ++i) {
      const double target = UniformFromBits(words[i].w[0], words[i].w[1]) * total;
      // The first shard whose cumulative weight exceeds the target; rounding
      // at the very top falls to the last shard with weight, never to an
      // empty one.
      const int64_t k = FirstAbove(first, last - first, target);
      shard_of_row[begin + i] = static_cast<int32_t>(k);
      rank_in_shard[begin + i] = counts[k]++;
    }
  }
}

SampleRequest TopsRequest(int64_t strategy, int64_t count, int64_t entry_words,
                          int64_t capacity) {
  const SampleRequest request = ShardRequest(strategy, 0.0, count);
  if (!Ranks(request.strategy)) throw InvalidArgument("only TopK and Recent rank shards");
  if (entry_words != std::min(count, capacity) * kEntryWords) {
    throw InvalidArgument("the best list must hold min(count, capacity) entries");
  }
  return request;
}

RankShape RankShapeOf(int64_t summary_words, int64_t entry_words) {
  const int64_t shards = summary_words / kSummaryWords;
  if (shards < 1 || shards * kSummaryWords != summary_words) {
    throw InvalidArgument("the gathered summaries have the wrong size");
  }
  const int64_t per_shard = entry_words / (shards * kEntryWords);
  if (per_shard < 1 || per_shard * shards * kEntryWords != entry_words) {
    throw InvalidArgument("expected one best list per shard");
  }
  return {shards, per_shard};
}

void TranslateKeys(const int64_t* keys, int64_t* out, int64_t count, int64_t shard,
                   int shard_shift, bool to_local) {
  const int64_t low = (int64_t{1} << shard_shift) - 1;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t k = keys[i];
    if (to_local) {
      out[i] = k >= 0 && (k >> shard_shift) == shard ? (k & low) : -1;
    } else {
      out[i] = k >= 0 && k <= low ? GlobalKey(shard, shard_shift, k) : -1;
    }
  }
}

std::vector<uint64_t> ServeDraws(Table& table, const SampleRequest& request, int64_t me,
                                 int shard_shift, const ShardSummary* summaries, int64_t shards,
                                 const uint32_t* seeds, const int32_t* counts, int64_t block,
                                 Draw* draws) {
  CheckSummaries(summaries, shards);
  if (me < 0 || me >= shards) throw InvalidArgument("this shard's number is out of range");
  double total = 0, size = 0;
  for (int64_t k = 0; k < shards; ++k) {
    total += summaries[k].weight;
    size += summaries[k].size;
  }
  // The probability of this shard when the requesters drew it (step 2).
  const double shard_probability = total > 0 ? summaries[me].weight / total : 0.0;
  std::vector<uint64_t> tickets;
  try {
    for (int64_t j = 0; j < shards; ++j) {
      if (counts[j] < 0 || counts[j] > block) {
        throw InvalidArgument("requester " + std::to_string(j) + " asked for " +
                              std::to_string(counts[j]) + " rows, outside [0, " +
                              std::to_string(block) + "]");
      }
      Draw* rows = draws + j * block;
      if (counts[j] > 0) {
        SampleRequest r = request;
        r.batch = counts[j];
        // Ranked strategies draw among this shard's own best g_me (a shard
        // is asked for rows only when g_me >= 1).
        if (Ranks(r.strategy)) r.count = static_cast<int64_t>(summaries[me].weight);
        tickets.push_back(table.Select(r, seeds + 2 * j, rows));
      }
      for (int64_t b = 0; b < counts[j]; ++b) {
        rows[b].key = GlobalKey(me, shard_shift, rows[b].key);
        rows[b].table_size = static_cast<int64_t>(size);
        rows[b].probability = static_cast<float>(shard_probability * rows[b].probability);
      }
    }
  } catch (...) {
    for (uint64_t ticket : tickets) table.EndSample(ticket);
    throw;
  }
  return tickets;
}

}  // namespace gearjax
