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
// TopK(k) and Recent(n) are global too: uniform over the k (n) items that
// rank highest over every shard. Step 1 then also gathers each shard's own
// best list (Table::Tops: its min(k, size) best (priority, stamp) pairs, or
// stamps for Recent), and RankShards counts how many of the global best g_m
// each shard m holds: those are exactly shard m's own best g_m, so drawing
// shard m with probability g_m / K (K = sum of g_m) and then uniformly among
// its own best g_m gives every one of the K items probability 1 / K. Items
// of different shards are ordered by insertion stamp, then shard number (the
// higher is newer); stamps are the hosts' clocks (Table), so across hosts
// "newer" is as exact as their clocks are synchronised.
//
// Summaries travel as eight uint32 words (four float64) so that JAX programs
// without x64 carry them unchanged; best lists as four words an entry.
#pragma once

#include <cstdint>
#include <vector>

#include "core/draw.h"
#include "core/table/table.h"

namespace gearjax {

struct ShardSummary {
  double shard;      // the shard's number, checked by every reader
  double size;       // live trajectories
  double num_steps;  // their steps
  double weight;     // the strategy's total weight (StrategyTotals::weight)
};
static_assert(sizeof(ShardSummary) == 32);
inline constexpr int64_t kSummaryWords = 8;
inline constexpr int64_t kEntryWords = 4;

ShardSummary Summarize(int64_t shard, const StrategyTotals& totals);

// The request of a sharded draw by strategy code, alpha (Prioritized) and
// count (TopK, Recent; >= 1); throws InvalidArgument for an unknown code.
SampleRequest ShardRequest(int64_t strategy, double alpha, int64_t count = 1);

// The count a shard's serve request carries when it is checked, before
// ServeDraws gives each requester's its own (the owner's share g_me of the
// global best, at least 1 whenever rows are asked): 1 for ranked strategies,
// unused by the others.
inline int64_t ServeRequestCount(int64_t strategy) {
  return strategy >= 0 && strategy <= INT32_MAX && Ranks(static_cast<Strategy>(strategy)) ? 1 : 0;
}

// For TopK(count) or Recent(count): replaces each summary's weight by g_m,
// the number of shard m's entries among the `count` best of all shards.
// entries[m * per_shard ...] is shard m's best list (Table::Tops), best
// first, padded with stamp -1. Throws InvalidArgument on a malformed list
// (out of order, a bad priority or stamp, an entry after the padding).
void RankShards(Strategy strategy, int64_t count, const TopEntry* entries, int64_t per_shard,
                ShardSummary* summaries, int64_t shards);

// Throws InvalidArgument unless summaries[k] is shard k's for every k (a
// collective that did not reach every process, say a global program fed one
// process's data, shows up here) and every field is finite and >= 0.
void CheckSummaries(const ShardSummary* summaries, int64_t shards);

// Draws the shard of each of `batch` rows, row b from the 53-bit uniform of
// RowWords(seed, b): shard k with probability weight_k / W. Writes the shard
// of each row, each row's rank among the rows drawn from its shard (how many
// rows before it went to the same shard: where it lies in that shard's
// block), and how many rows each shard got. Throws InvalidArgument when every
// weight is 0 (nothing to draw anywhere).
void PlanShards(const ShardSummary* summaries, int64_t shards, const uint32_t seed[2],
                int64_t batch, int32_t* shard_of_row, int32_t* rank_in_shard,
                int32_t* counts);

// Key layout of a sharded table: the shard's number above `shard_shift` bits,
// the shard's own key (KeyLayout, at most shard_shift bits) below.
inline int64_t GlobalKey(int64_t shard, int shard_shift, int64_t local_key) {
  return (shard << shard_shift) | local_key;
}

// The request of a shard's TopK(count) or Recent(count) best list of
// `entry_words` words (kEntryWords an entry); throws InvalidArgument unless
// the strategy ranks shards and the list holds min(count, capacity) entries.
SampleRequest TopsRequest(int64_t strategy, int64_t count, int64_t entry_words,
                          int64_t capacity);

// How many shards and entries a shard the gathered summaries and best lists
// hold (given their word counts); throws InvalidArgument unless they agree.
struct RankShape {
  int64_t shards, per_shard;
};
RankShape RankShapeOf(int64_t summary_words, int64_t entry_words);

// Keys between a shard's own layout and the global one: with to_local, global
// keys of `shard` become its own keys and every other key -1 (priority updates
// skip those); otherwise own keys (at most shard_shift bits) become global and
// anything else -1. `out` may be `keys`.
void TranslateKeys(const int64_t* keys, int64_t* out, int64_t count, int64_t shard,
                   int shard_shift, bool to_local);

// The owner's part: for each requester j (of `shards`), draws counts[j] rows
// from `table` with seeds[j] into draws[j * block, j * block + counts[j]); the
// rest of each block is left as it was (the requester never reads it).
// Rows get global keys, the global size and global probabilities (see above),
// computed from the gathered summaries. For TopK and Recent the summaries are
// ranked (RankShards) and this shard draws among its own best g_me. Each requester's rows are one Select
// (one wait on the rate limiter, one ticket); the tickets are returned, to
// hand back with EndSample once the windows are copied. On a throw, tickets
// already taken are returned first.
std::vector<uint64_t> ServeDraws(Table& table, const SampleRequest& request, int64_t me,
                                 int shard_shift, const ShardSummary* summaries, int64_t shards,
                                 const uint32_t* seeds, const int32_t* counts, int64_t block,
                                 Draw* draws);

}  // namespace gearjax
