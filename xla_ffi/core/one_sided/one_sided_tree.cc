// The one-sided draw by the shards' sum trees (one_sided_draw.h; steps 1
// and 2 of one_sided.h for Uniform, Timestep, Prioritized and
// PrioritizedSteps): a snapshot of each shard in one read, each row's shard
// in proportion to the totals, its slot (and step) down that shard's tree,
// its record.
#include <algorithm>
#include <cstring>
#include <map>

#include "core/common.h"
#include "core/one_sided/one_sided_draw.h"
#include "core/selectors/strategies.h"
#include "core/selectors/sum_tree.h"

namespace gearjax::one_sided {
namespace {

constexpr int64_t kLineBytes = 8 * kSumTreeFanout;

// What one read of a shard held.
struct Snapshot {
  std::map<int, const double*> levels;  // whole tree levels by index
  double total = 0.0;
  double size = 0.0;
  const SlotInfo* records = nullptr;  // all of them, or nullptr (too large)
};

double Uniform(const Words4& w, int first) { return UniformFromBits(w.w[first], w.w[first + 1]); }

// Each shard's tree levels that fit whole_read_bytes (from the root down;
// the root's line always), its size and, where they fit, its records: one
// read, marked fixed (its spans depend only on the layouts).
std::vector<Snapshot> TakeSnapshots(Reads& reads) {
  const std::vector<ShardLayout>& shards = reads.shards();
  std::vector<ShardSpans> spans;
  std::vector<std::vector<int>> whole(shards.size());
  size_t bytes = 0;
  for (size_t k = 0; k < shards.size(); ++k) {
    const ShardLayout& s = shards[k];
    ShardSpans spans_k{static_cast<int>(k), {}, {}, {}};
    int64_t budget = reads.whole_read_bytes();
    for (int level = static_cast<int>(s.tree_offsets.size()) - 1; level >= 0; --level) {
      const int64_t size = 8 * LevelNodes(s, static_cast<size_t>(level));
      if (level + 1 < static_cast<int>(s.tree_offsets.size()) && size > budget) break;
      budget -= size;
      whole[k].push_back(level);
      spans_k.remote.push_back(s.tree + 8 * static_cast<uint64_t>(s.tree_offsets[level]));
      spans_k.sizes.push_back(static_cast<uint64_t>(size));
    }
    spans_k.remote.push_back(s.uniform_root);
    spans_k.sizes.push_back(8);
    if (reads.RecordsFit(k)) {
      spans_k.remote.push_back(s.slots);
      spans_k.sizes.push_back(static_cast<uint64_t>(s.capacity) * sizeof(SlotInfo));
    }
    for (uint64_t size : spans_k.sizes) {
      spans_k.local.push_back(bytes);  // offsets now, addresses below
      bytes += size;
    }
    spans.push_back(std::move(spans_k));
  }
  reads.Stage(kSnapshotStaging, bytes, spans);
  reads.Read(spans, /*fixed=*/true);
  std::vector<Snapshot> snapshots(shards.size());
  for (size_t k = 0; k < shards.size(); ++k) {
    const ShardSpans& s = spans[k];
    Snapshot& snap = snapshots[k];
    size_t i = 0;
    for (int level : whole[k]) {
      snap.levels[level] = reinterpret_cast<const double*>(s.local[i++]);
    }
    snap.total = snap.levels[whole[k][0]][0];
    std::memcpy(&snap.size, reinterpret_cast<const void*>(s.local[i++]), 8);
    if (reads.RecordsFit(k)) snap.records = reinterpret_cast<const SlotInfo*>(s.local[i]);
  }
  return snapshots;
}

// Each row's leaf down its shard's tree, as its slot (and, `per_step`, the
// step its window starts at: d.step) and weight; slot -1 where the path found
// no weight or ended past the shard's leaves (capacity of them, or capacity x
// max_length per step). Through the levels its snapshot holds, then one read
// a level (every shard at once). d.rows and `target` (each row's target in
// its shard's total) are given.
void Descend(Reads& reads, const std::vector<Snapshot>& snapshots,
             std::vector<std::vector<double>>& target, bool per_step, Drawn& d) {
  const std::vector<ShardLayout>& shards = reads.shards();
  const size_t S = shards.size();
  std::vector<std::vector<int64_t>> node(S);
  std::vector<std::vector<char>> dead(S);
  int depth_max = 0;
  for (size_t k = 0; k < S; ++k) {
    node[k].assign(d.rows[k].size(), 0);
    d.weight[k].assign(d.rows[k].size(), 0.0);
    dead[k].assign(d.rows[k].size(), 0);
    depth_max = std::max(depth_max, static_cast<int>(shards[k].tree_offsets.size()) - 1);
  }
  for (int depth = 0; depth < depth_max; ++depth) {
    std::vector<ShardSpans> spans;
    std::vector<const double*> held(S, nullptr);
    std::vector<size_t> at(S, 0);
    size_t bytes = 0;
    for (size_t k = 0; k < S; ++k) {
      const int level = static_cast<int>(shards[k].tree_offsets.size()) - 2 - depth;
      if (level < 0 || d.rows[k].empty()) continue;
      // A line past its level (a layout whose levels do not nest, from a
      // buggy or hostile peer; the layout check sees only whole lines in
      // order): the row is dead, and line 0 is read in its place.
      const int64_t lines = LevelNodes(shards[k], static_cast<size_t>(level)) / kSumTreeFanout;
      for (size_t i = 0; i < node[k].size(); ++i) {
        if (node[k][i] >= lines) {
          dead[k][i] = 1;
          node[k][i] = 0;
        }
      }
      auto found = snapshots[k].levels.find(level);
      if (found != snapshots[k].levels.end()) {
        held[k] = found->second;
        continue;
      }
      ShardSpans s{static_cast<int>(k), {}, {}, {}};
      at[k] = bytes;
      const uint64_t base =
          shards[k].tree + 8 * static_cast<uint64_t>(shards[k].tree_offsets[level]);
      for (int64_t n : node[k]) {
        s.remote.push_back(base + kLineBytes * static_cast<uint64_t>(n));
        s.sizes.push_back(kLineBytes);
        s.local.push_back(bytes);
        bytes += kLineBytes;
      }
      spans.push_back(std::move(s));
    }
    const uint8_t* base = reads.Stage(kLineStaging, bytes, spans);
    reads.Read(spans);
    for (size_t k = 0; k < S; ++k) {
      const int level = static_cast<int>(shards[k].tree_offsets.size()) - 2 - depth;
      if (level < 0 || d.rows[k].empty()) continue;
      for (size_t i = 0; i < d.rows[k].size(); ++i) {
        const double* line = held[k] != nullptr
            ? held[k] + kSumTreeFanout * node[k][i]
            : reinterpret_cast<const double*>(base + at[k]) + kSumTreeFanout * i;
        double t = target[k][i];
        const int c = dead[k][i] ? -1 : SumTreeChild(line, &t);
        if (c < 0) {
          dead[k][i] = 1;
          continue;
        }
        target[k][i] = t;
        d.weight[k][i] = line[c];
        node[k][i] = node[k][i] * kSumTreeFanout + c;
      }
    }
  }
  for (size_t k = 0; k < S; ++k) {
    // A step strategy's leaf s * max_length + t is step t of slot s.
    const int64_t per_slot = per_step ? shards[k].max_length : 1;
    d.slot[k].assign(node[k].size(), -1);
    d.step[k].assign(node[k].size(), -1);
    for (size_t i = 0; i < node[k].size(); ++i) {
      if (dead[k][i] || node[k][i] >= shards[k].capacity * per_slot) continue;
      d.slot[k][i] = node[k][i] / per_slot;
      if (per_step) d.step[k][i] = node[k][i] % per_slot;
    }
  }
}

}  // namespace

Drawn DrawByTree(Reads& reads, const Request& request, const std::vector<int64_t>& todo,
                 int round) {
  const std::vector<Snapshot> snapshots = TakeSnapshots(reads);
  const size_t S = snapshots.size();
  Drawn d(S);
  double size = 0.0;
  for (const Snapshot& s : snapshots) {
    d.total += s.total;
    size += s.size;
  }
  d.table_size = static_cast<int64_t>(size + 0.5);
  if (!(d.total > 0.0)) {
    throw InvalidArgument("cannot sample: no shard holds anything this strategy can draw "
                          "(every shard is empty, or every priority is 0)");
  }
  // Each row's shard and target within it.
  std::vector<std::vector<double>> target(S);
  for (int64_t row : todo) {
    const Words4 w = AttemptWords(request.seed, row, static_cast<uint32_t>(2 * round));
    const double u = Uniform(w, 0) * d.total;
    size_t k = 0;
    double cumulative = snapshots[0].total;
    while (k + 1 < S && !(u < cumulative)) cumulative += snapshots[++k].total;
    while (k > 0 && !(snapshots[k].total > 0.0)) --k;  // rounding past the last positive
    d.rows[k].push_back(row);
    target[k].push_back(Uniform(w, 2) * snapshots[k].total);
    d.start_words[k].push_back(
        AttemptWords(request.seed, row, static_cast<uint32_t>(2 * round + 1)));
  }
  Descend(reads, snapshots, target, DrawsSteps(request.strategy), d);
  // The records before the window: from the snapshot, or read now.
  std::vector<std::vector<int64_t>> to_read(S);
  for (size_t k = 0; k < S; ++k) {
    if (snapshots[k].records != nullptr) continue;
    for (int64_t s : d.slot[k]) to_read[k].push_back(std::max<int64_t>(s, 0));
  }
  std::vector<std::vector<SlotInfo>> read_now = reads.Records(to_read);
  for (size_t k = 0; k < S; ++k) {
    if (snapshots[k].records == nullptr) {
      d.before[k] = std::move(read_now[k]);
      continue;
    }
    for (int64_t s : d.slot[k]) {
      d.before[k].push_back(snapshots[k].records[std::max<int64_t>(s, 0)]);
    }
  }
  return d;
}

}  // namespace gearjax::one_sided
