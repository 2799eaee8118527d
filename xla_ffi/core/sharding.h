// Global sampling over the shards of a sharded table (gearjax/sharded), the
// arithmetic every exchange shares. One shard per process; a global sample of
// B rows per process runs in three steps:
//
//  1. Every shard summarises itself (Summarize): its number, its size, its
//     steps and the total weight of the strategy (Table::Totals). The
//     summaries are gathered, so every process holds the same P of them.
//  2. Every process draws the shard of each row of every process with
//     probability weight_k / sum of weights (PlanShards), in float64 from
//     that process's seed (gathered with the summaries), so each owner knows
//     what every process asks of it without another exchange.
//  3. The owner of each shard draws, for each process j, the rows j asked of
//     it, inside its shard, by the strategy (ServeDraws): a row drawn so has
//     probability (weight_k / W) * (w_i / weight_k) = w_i / W, the
//     probability it would have in one table holding every shard, and the
//     rows stay independent. Rows come back tagged with global keys and the
//     global size.
//
// Summaries travel as eight uint32 words (four float64) so that JAX programs
// without x64 carry them unchanged.
#pragma once

#include <cstdint>
#include <vector>

#include "draw.h"
#include "table.h"

namespace gearjax {

struct ShardSummary {
  double shard;      // the shard's number, checked by every reader
  double size;       // live trajectories
  double num_steps;  // their steps
  double weight;     // the strategy's total weight (StrategyTotals::weight)
};
static_assert(sizeof(ShardSummary) == 32);
inline constexpr int64_t kSummaryWords = 8;

ShardSummary Summarize(int64_t shard, const StrategyTotals& totals);

// The request of a sharded draw by strategy code (Uniform, Timestep or
// Prioritized, the strategies whose shards are weighed by totals); throws
// InvalidArgument for any other code.
SampleRequest ShardRequest(int64_t strategy, double alpha);

// Throws InvalidArgument unless summaries[k] is shard k's for every k (a
// collective that did not reach every process, say a global program fed one
// process's data, shows up here) and every field is finite and >= 0.
void CheckSummaries(const ShardSummary* summaries, int64_t shards);

// Draws the shard of each of `batch` rows, row b from the 53-bit uniform of
// RowWords(seed, b): shard k with probability weight_k / W. Writes the shard
// of each row and how many rows each shard got. Throws InvalidArgument when
// every weight is 0 (nothing to draw anywhere).
void PlanShards(const ShardSummary* summaries, int64_t shards, const uint32_t seed[2],
                int64_t batch, int32_t* shard_of_row, int32_t* counts);

// Key layout of a sharded table: the shard's number above `shard_shift` bits,
// the shard's own key (KeyLayout, at most shard_shift bits) below.
inline int64_t GlobalKey(int64_t shard, int shard_shift, int64_t local_key) {
  return (shard << shard_shift) | local_key;
}

// The owner's part: for each requester j (of `shards`), draws counts[j] rows
// from `table` with seeds[j] into draws[j * block, j * block + counts[j]); the
// rest of each block is left as it was (the requester never reads it).
// Rows get global keys, the global size and global probabilities (see above),
// computed from the gathered summaries. Each requester's rows are one Select
// (one wait on the rate limiter, one ticket); the tickets are returned, to
// hand back with EndSample once the windows are copied. On a throw, tickets
// already taken are returned first.
std::vector<uint64_t> ServeDraws(Table& table, const SampleRequest& request, int64_t me,
                                 int shard_shift, const ShardSummary* summaries, int64_t shards,
                                 const uint32_t* seeds, const int32_t* counts, int64_t block,
                                 Draw* draws);

}  // namespace gearjax
