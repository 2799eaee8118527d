// The native one-sided sampler (see one_sided.h).
#include "one_sided.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "common.h"
#include "random.h"
#include "slots.h"
#include "sum_tree.h"
#include "window.h"

namespace gearjax::one_sided {
namespace {

constexpr int kSnapshot = 0, kLines = 1, kRecords = 2;
constexpr int64_t kLineBytes = 8 * kSumTreeFanout;

// What one read of a shard held (step 1).
struct Snapshot {
  std::map<int, const double*> levels;  // whole tree levels by index
  double total = 0.0;
  double size = 0.0;
  const SlotInfo* records = nullptr;  // all of them, or nullptr (too large)
};

int64_t LevelNodes(const ShardLayout& s, size_t level) {
  const int64_t end = level + 1 < s.tree_offsets.size() ? s.tree_offsets[level + 1]
                                                         : s.tree_nodes;
  return end - s.tree_offsets[level];
}

bool RecordsFit(const ShardLayout& s) {
  return s.capacity * static_cast<int64_t>(sizeof(SlotInfo)) <= kWholeReadBytes;
}

double Uniform(const Words4& w, int first) { return UniformFromBits(w.w[first], w.w[first + 1]); }

class Sampler {
 public:
  Sampler(Reader& reader, const std::vector<ShardLayout>& shards, const Request& request,
          const Outputs& out)
      : reader_(reader), shards_(shards), r_(request), out_(out) {
    width_ = WindowWidth(r_.window, shards_[0].max_length);
    seed_[0] = r_.seed[0];  // the caller mixes in its process, so processes differ
    seed_[1] = r_.seed[1];
  }

  Counts Run() {
    std::vector<int64_t> todo(static_cast<size_t>(r_.batch));
    for (int64_t b = 0; b < r_.batch; ++b) todo[b] = b;
    std::vector<int32_t> valid(static_cast<size_t>(r_.batch), 0);
    double table_size = -1.0;
    for (int round = 0; round < kMaxRounds && !todo.empty(); ++round) {
      TakeSnapshot();
      double total = 0.0;
      for (const Snapshot& s : snapshots_) total += s.total;
      if (table_size < 0) {
        table_size = 0.0;
        for (const Snapshot& s : snapshots_) table_size += s.size;
      }
      if (!(total > 0.0)) {
        throw InvalidArgument("cannot sample: no shard holds anything this strategy can draw "
                              "(every shard is empty, or every priority is 0)");
      }
      todo = Round(todo, round, total, static_cast<int64_t>(table_size + 0.5), valid);
    }
    if (!todo.empty()) {
      throw std::runtime_error(std::to_string(todo.size()) + " rows could not be read "
                               "consistently in " + std::to_string(kMaxRounds) +
                               " rounds: their shards are rewriting slots faster than they "
                               "can be read");
    }
    Pad(valid);
    return counts_;
  }

 private:
  // One round trip: every shard's spans at once (shards without spans are
  // passed along and copy nothing); `fixed` as Reader::Read.
  void Read(const std::vector<ShardSpans>& spans, bool fixed = false) {
    int64_t descriptors = 0;
    for (const ShardSpans& s : spans) descriptors += static_cast<int64_t>(s.sizes.size());
    if (descriptors == 0) return;
    counts_.round_trips += 1;
    counts_.descriptors += descriptors;
    const nixl::ReadResult result = reader_.Read(shards_, spans, fixed);
    if (result.request >= 0) throw ShardUnavailable(spans[result.request].shard, result.why);
  }

  // Spans whose local side holds offsets into `bytes` of staging `use`: the
  // buffer, with the offsets turned into its addresses.
  uint8_t* Stage(int use, size_t bytes, std::vector<ShardSpans>& spans) {
    uint8_t* base = reader_.Staging(use, std::max<size_t>(bytes, 1));
    for (ShardSpans& s : spans) {
      for (uint64_t& at : s.local) at += reinterpret_cast<uint64_t>(base);
    }
    return base;
  }

  void TakeSnapshot() {
    std::vector<ShardSpans> spans;
    std::vector<std::vector<int>> whole(shards_.size());
    size_t bytes = 0;
    for (size_t k = 0; k < shards_.size(); ++k) {
      const ShardLayout& s = shards_[k];
      ShardSpans spans_k{static_cast<int>(k), {}, {}, {}};
      int64_t budget = kWholeReadBytes;
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
      if (RecordsFit(s)) {
        spans_k.remote.push_back(s.slots);
        spans_k.sizes.push_back(static_cast<uint64_t>(s.capacity) * sizeof(SlotInfo));
      }
      for (uint64_t size : spans_k.sizes) {
        spans_k.local.push_back(bytes);  // offsets now, addresses below
        bytes += size;
      }
      spans.push_back(std::move(spans_k));
    }
    Stage(kSnapshot, bytes, spans);
    Read(spans, /*fixed=*/true);
    snapshots_.assign(shards_.size(), Snapshot{});
    for (size_t k = 0; k < shards_.size(); ++k) {
      const ShardSpans& s = spans[k];
      Snapshot& snap = snapshots_[k];
      size_t i = 0;
      for (int level : whole[k]) {
        snap.levels[level] = reinterpret_cast<const double*>(s.local[i++]);
      }
      snap.total = snap.levels[whole[k][0]][0];
      std::memcpy(&snap.size, reinterpret_cast<const void*>(s.local[i++]), 8);
      if (RecordsFit(shards_[k])) snap.records = reinterpret_cast<const SlotInfo*>(s.local[i]);
    }
  }

  // Reads the records of `slots` (one per row of shard k) now: whole where
  // they fit, else one descriptor a slot.
  std::vector<std::vector<SlotInfo>> ReadRecords(const std::vector<std::vector<int64_t>>& slots) {
    std::vector<ShardSpans> spans;
    std::vector<size_t> at(shards_.size(), 0);
    size_t bytes = 0;
    for (size_t k = 0; k < shards_.size(); ++k) {
      ShardSpans s{static_cast<int>(k), {}, {}, {}};
      at[k] = bytes;
      if (slots[k].empty()) {
      } else if (RecordsFit(shards_[k])) {
        s.remote.push_back(shards_[k].slots);
        s.sizes.push_back(static_cast<uint64_t>(shards_[k].capacity) * sizeof(SlotInfo));
      } else {
        for (int64_t slot : slots[k]) {
          s.remote.push_back(shards_[k].slots + static_cast<uint64_t>(slot) * sizeof(SlotInfo));
          s.sizes.push_back(sizeof(SlotInfo));
        }
      }
      for (uint64_t size : s.sizes) {
        s.local.push_back(bytes);
        bytes += size;
      }
      spans.push_back(std::move(s));
    }
    const uint8_t* base = Stage(kRecords, bytes, spans);
    Read(spans);
    std::vector<std::vector<SlotInfo>> out(shards_.size());
    for (size_t k = 0; k < shards_.size(); ++k) {
      const auto* records = reinterpret_cast<const SlotInfo*>(base + at[k]);
      const bool whole = RecordsFit(shards_[k]);
      for (size_t i = 0; i < slots[k].size(); ++i) {
        out[k].push_back(records[whole ? slots[k][i] : static_cast<int64_t>(i)]);
      }
    }
    return out;
  }

  // One round over `todo`: draws, reads, checks; returns the rows to draw again.
  std::vector<int64_t> Round(const std::vector<int64_t>& todo, int round, double total,
                             int64_t table_size, std::vector<int32_t>& valid_out) {
    const size_t S = shards_.size();
    // Each row's shard and target within it.
    std::vector<std::vector<int64_t>> rows(S);
    std::vector<std::vector<double>> target(S);
    std::vector<std::vector<Words4>> words(S);
    for (int64_t row : todo) {
      const Words4 w = AttemptWords(seed_, row, static_cast<uint32_t>(2 * round));
      const double u = Uniform(w, 0) * total;
      size_t k = 0;
      double cumulative = snapshots_[0].total;
      while (k + 1 < S && !(u < cumulative)) cumulative += snapshots_[++k].total;
      while (k > 0 && !(snapshots_[k].total > 0.0)) --k;  // rounding past the last positive
      rows[k].push_back(row);
      target[k].push_back(Uniform(w, 2) * snapshots_[k].total);
      words[k].push_back(AttemptWords(seed_, row, static_cast<uint32_t>(2 * round + 1)));
    }
    // The slot: down each shard's tree.
    std::vector<std::vector<int64_t>> node(S), slot(S);
    std::vector<std::vector<double>> weight(S);
    std::vector<std::vector<char>> dead(S);
    int depth_max = 0;
    for (size_t k = 0; k < S; ++k) {
      node[k].assign(rows[k].size(), 0);
      weight[k].assign(rows[k].size(), 0.0);
      dead[k].assign(rows[k].size(), 0);
      depth_max = std::max(depth_max, static_cast<int>(shards_[k].tree_offsets.size()) - 1);
    }
    for (int depth = 0; depth < depth_max; ++depth) {
      std::vector<ShardSpans> spans;
      std::vector<const double*> held(S, nullptr);
      std::vector<size_t> at(S, 0);
      size_t bytes = 0;
      for (size_t k = 0; k < S; ++k) {
        const int level = static_cast<int>(shards_[k].tree_offsets.size()) - 2 - depth;
        if (level < 0 || rows[k].empty()) continue;
        auto found = snapshots_[k].levels.find(level);
        if (found != snapshots_[k].levels.end()) {
          held[k] = found->second;
          continue;
        }
        ShardSpans s{static_cast<int>(k), {}, {}, {}};
        at[k] = bytes;
        const uint64_t base =
            shards_[k].tree + 8 * static_cast<uint64_t>(shards_[k].tree_offsets[level]);
        for (int64_t n : node[k]) {
          s.remote.push_back(base + kLineBytes * static_cast<uint64_t>(n));
          s.sizes.push_back(kLineBytes);
          s.local.push_back(bytes);
          bytes += kLineBytes;
        }
        spans.push_back(std::move(s));
      }
      const uint8_t* base = Stage(kLines, bytes, spans);
      Read(spans);
      for (size_t k = 0; k < S; ++k) {
        const int level = static_cast<int>(shards_[k].tree_offsets.size()) - 2 - depth;
        if (level < 0 || rows[k].empty()) continue;
        for (size_t i = 0; i < rows[k].size(); ++i) {
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
          weight[k][i] = line[c];
          node[k][i] = node[k][i] * kSumTreeFanout + c;
        }
      }
    }
    // The records before the window: from the snapshot, or read now.
    std::vector<std::vector<SlotInfo>> before(S);
    std::vector<std::vector<int64_t>> to_read(S);
    for (size_t k = 0; k < S; ++k) {
      slot[k] = node[k];
      for (size_t i = 0; i < slot[k].size(); ++i) {
        if (dead[k][i] || slot[k][i] >= shards_[k].capacity) slot[k][i] = -1;
      }
      if (snapshots_[k].records == nullptr) {
        for (int64_t s : slot[k]) to_read[k].push_back(std::max<int64_t>(s, 0));
      }
    }
    std::vector<std::vector<SlotInfo>> read_now = ReadRecords(to_read);
    for (size_t k = 0; k < S; ++k) {
      if (snapshots_[k].records == nullptr) {
        before[k] = std::move(read_now[k]);
      } else {
        for (int64_t s : slot[k]) {
          before[k].push_back(snapshots_[k].records[std::max<int64_t>(s, 0)]);
        }
      }
    }
    // The windows, straight into the outputs.
    std::vector<int64_t> failed;
    std::vector<std::vector<size_t>> planned(S);
    std::vector<std::vector<int64_t>> start(S), valid(S), planned_slots(S);
    std::vector<ShardSpans> spans;
    for (size_t k = 0; k < S; ++k) {
      const ShardLayout& s = shards_[k];
      ShardSpans sp{static_cast<int>(k), {}, {}, {}};
      for (size_t i = 0; i < rows[k].size(); ++i) {
        const SlotInfo& rec = before[k][i];
        const bool good = slot[k][i] >= 0 && weight[k][i] > 0.0 &&
                          rec.state == SlotState::kLive && rec.length >= 1 &&
                          rec.length <= s.max_length;
        if (!good) {
          failed.push_back(rows[k][i]);
          continue;
        }
        const int64_t first = r_.window > 0
            ? static_cast<int64_t>(BelowFromBits(words[k][i].w[0], words[k][i].w[1],
                                                 static_cast<uint64_t>(rec.length)))
            : 0;
        const int64_t n = std::min<int64_t>(width_, rec.length - first);
        const int64_t offset = r_.pad_left ? width_ - n : 0;
        planned[k].push_back(i);
        planned_slots[k].push_back(slot[k][i]);
        start[k].push_back(first);
        valid[k].push_back(n);
        for (size_t c = 0; c < r_.columns.size(); ++c) {
          const uint64_t step = static_cast<uint64_t>(r_.columns[c].step_bytes);
          sp.remote.push_back(s.arena + s.column_offsets[c] +
                              (static_cast<uint64_t>(slot[k][i]) * s.max_length + first) * step);
          sp.local.push_back(reinterpret_cast<uint64_t>(out_.columns[c]) +
                             (static_cast<uint64_t>(rows[k][i]) * width_ + offset) * step);
          sp.sizes.push_back(static_cast<uint64_t>(n) * step);
        }
      }
      spans.push_back(std::move(sp));
    }
    Read(spans);
    // The records again: a slot rewritten meanwhile shows another key or state.
    std::vector<std::vector<SlotInfo>> after = ReadRecords(planned_slots);
    for (size_t k = 0; k < S; ++k) {
      for (size_t j = 0; j < planned[k].size(); ++j) {
        const size_t i = planned[k][j];
        const int64_t row = rows[k][i];
        if (after[k][j].key != before[k][i].key || after[k][j].state != SlotState::kLive) {
          failed.push_back(row);
          continue;
        }
        out_.keys[row] = (static_cast<int64_t>(r_.numbers[k]) << r_.shard_shift) |
                         before[k][i].key;
        out_.start[row] = static_cast<int32_t>(start[k][j]);
        out_.probability[row] = static_cast<float>(weight[k][i] / total);
        out_.table_size[row] = table_size;
        out_.valid[row] = static_cast<int32_t>(valid[k][j]);
        out_.shard[row] = r_.numbers[k];
        valid_out[row] = static_cast<int32_t>(valid[k][j]);
      }
    }
    std::sort(failed.begin(), failed.end());
    return failed;
  }

  // Padding, once, where no window step landed.
  void Pad(const std::vector<int32_t>& valid) {
    for (size_t c = 0; c < r_.columns.size(); ++c) {
      const Column& column = r_.columns[c];
      for (int64_t b = 0; b < r_.batch; ++b) {
        const int64_t n = valid[b];
        uint8_t* row = out_.columns[c] + static_cast<size_t>(b * width_ * column.step_bytes);
        uint8_t* pad = r_.pad_left ? row : row + n * column.step_bytes;
        for (int64_t t = 0; t < width_ - n; ++t) {
          std::memcpy(pad + t * column.step_bytes, column.pad.data(),
                      static_cast<size_t>(column.step_bytes));
        }
      }
    }
  }

  Reader& reader_;
  const std::vector<ShardLayout>& shards_;
  const Request& r_;
  const Outputs& out_;
  int64_t width_ = 0;
  uint32_t seed_[2];
  std::vector<Snapshot> snapshots_;
  Counts counts_;
};

}  // namespace

nixl::ReadResult CopyReader::Read(const std::vector<ShardLayout>& shards,
                                  const std::vector<ShardSpans>& spans, bool /*fixed*/) {
  for (size_t i = 0; i < spans.size(); ++i) {
    if (!shards[spans[i].shard].peer.empty()) {
      return {static_cast<int>(i), "a CopyReader reads this process's shards only"};
    }
    for (size_t j = 0; j < spans[i].sizes.size(); ++j) {
      std::memcpy(reinterpret_cast<void*>(spans[i].local[j]),
                  reinterpret_cast<const void*>(spans[i].remote[j]), spans[i].sizes[j]);
    }
  }
  return {};
}

uint8_t* CopyReader::Staging(int use, size_t bytes) {
  std::vector<uint8_t>& buffer = staging_[use];
  if (buffer.size() < bytes) buffer.resize(bytes);
  return buffer.data();
}

Counts Sample(Reader& reader, const std::vector<ShardLayout>& shards, const Request& request,
              const Outputs& out) {
  if (shards.empty() || request.numbers.size() != shards.size()) {
    throw InvalidArgument("a one-sided sample needs one number per shard, and a shard");
  }
  if (request.batch < 1 || out.columns.size() != request.columns.size()) {
    throw InvalidArgument("a one-sided sample needs rows and one output per column");
  }
  for (const ShardLayout& s : shards) {
    bool ok = !s.tree_offsets.empty() && s.column_offsets.size() == request.columns.size() &&
              s.max_length == shards[0].max_length && s.capacity >= 1 && s.max_length >= 1 &&
              s.tree_nodes % kSumTreeFanout == 0;
    for (size_t level = 0; ok && level < s.tree_offsets.size(); ++level) {
      const int64_t nodes = LevelNodes(s, level);  // in order, whole lines, inside the tree
      ok = s.tree_offsets[level] >= 0 && nodes > 0 && nodes % kSumTreeFanout == 0;
    }
    if (!ok) throw InvalidArgument("a shard's layout does not match the request");
  }
  if (request.window < 0 || request.window > shards[0].max_length) {
    throw InvalidArgument("the window must be in [0, max_length]");
  }
  Sampler sampler(reader, shards, request, out);
  return sampler.Run();
}

}  // namespace gearjax::one_sided
