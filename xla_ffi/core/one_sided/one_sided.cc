// The native one-sided sampler (see one_sided.h): the rounds of a sample,
// the reads its steps share, and step 3 (the windows and the records again).
// The draws of step 2 are one_sided_tree.cc and one_sided_ranked.cc.
#include "core/one_sided/one_sided.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "core/common.h"
#include "core/one_sided/one_sided_draw.h"
#include "core/selectors/strategies.h"
#include "core/selectors/sum_tree.h"
#include "core/window.h"

namespace gearjax::one_sided {

void Reads::Read(const std::vector<ShardSpans>& spans, bool fixed) {
  int64_t descriptors = 0;
  for (const ShardSpans& s : spans) descriptors += static_cast<int64_t>(s.sizes.size());
  if (descriptors == 0) return;
  counts_.round_trips += 1;
  counts_.descriptors += descriptors;
  const nixl::ReadResult result = reader_.Read(shards_, spans, fixed);
  if (result.request >= 0) throw ShardUnavailable(spans[result.request].shard, result.why);
}

uint8_t* Reads::Stage(int use, size_t bytes, std::vector<ShardSpans>& spans) {
  uint8_t* base = reader_.Staging(use, std::max<size_t>(bytes, 1));
  for (ShardSpans& s : spans) {
    for (uint64_t& at : s.local) at += reinterpret_cast<uint64_t>(base);
  }
  return base;
}

std::vector<std::vector<SlotInfo>> Reads::Records(
    const std::vector<std::vector<int64_t>>& slots) {
  std::vector<ShardSpans> spans;
  std::vector<size_t> at(shards_.size(), 0);
  size_t bytes = 0;
  for (size_t k = 0; k < shards_.size(); ++k) {
    ShardSpans s{static_cast<int>(k), {}, {}, {}};
    at[k] = bytes;
    if (slots[k].empty()) {
    } else if (RecordsFit(k)) {
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
  const uint8_t* base = Stage(kRecordStaging, bytes, spans);
  Read(spans);
  std::vector<std::vector<SlotInfo>> out(shards_.size());
  for (size_t k = 0; k < shards_.size(); ++k) {
    const auto* records = reinterpret_cast<const SlotInfo*>(base + at[k]);
    const bool whole = RecordsFit(k);
    for (size_t i = 0; i < slots[k].size(); ++i) {
      out[k].push_back(records[whole ? slots[k][i] : static_cast<int64_t>(i)]);
    }
  }
  return out;
}

namespace {

class Sampler {
 public:
  Sampler(Reader& reader, const std::vector<ShardLayout>& shards, const Request& request,
          const Outputs& out)
      : reads_(reader, shards, request.whole_read_bytes), shards_(shards), r_(request),
        out_(out), width_(WindowWidth(r_.window, shards_[0].max_length)),
        ranks_(Ranks(r_.strategy)) {}

  Counts Run() {
    std::vector<int64_t> todo(static_cast<size_t>(r_.batch));
    for (int64_t b = 0; b < r_.batch; ++b) todo[b] = b;
    std::vector<int32_t> valid(static_cast<size_t>(r_.batch), 0);
    int64_t table_size = -1;  // the first round's, for every row
    for (int round = 0; round < kMaxRounds && !todo.empty(); ++round) {
      const Drawn d = ranks_ ? DrawRanked(reads_, r_, todo, round)
                             : DrawByTree(reads_, r_, todo, round);
      if (table_size < 0) table_size = d.table_size;
      todo = ReadWindows(d, table_size, valid);
    }
    if (!todo.empty()) {
      throw std::runtime_error(std::to_string(todo.size()) + " rows could not be read "
                               "consistently in " + std::to_string(kMaxRounds) +
                               " rounds: their shards are rewriting slots faster than they "
                               "can be read");
    }
    Pad(valid);
    return reads_.counts();
  }

 private:
  // Step 3 for what a round drew: the windows straight into the outputs,
  // then the records again; returns the rows to draw again, in order.
  std::vector<int64_t> ReadWindows(const Drawn& d, int64_t table_size,
                                   std::vector<int32_t>& valid_out) {
    const size_t S = shards_.size();
    std::vector<int64_t> failed;
    std::vector<std::vector<size_t>> planned(S);
    std::vector<std::vector<int64_t>> start(S), valid(S), planned_slots(S);
    std::vector<ShardSpans> spans;
    for (size_t k = 0; k < S; ++k) {
      const ShardLayout& s = shards_[k];
      ShardSpans sp{static_cast<int>(k), {}, {}, {}};
      for (size_t i = 0; i < d.rows[k].size(); ++i) {
        const SlotInfo& rec = d.before[k][i];
        const int64_t step = d.step[k][i];  // >= 0: a drawn step starts the window
        const bool good = d.slot[k][i] >= 0 && d.weight[k][i] > 0.0 &&
                          rec.state == SlotState::kLive && rec.length >= 1 &&
                          rec.length <= s.max_length && step < rec.length;
        if (!good) {
          failed.push_back(d.rows[k][i]);
          continue;
        }
        const Words4& w = d.start_words[k][i];
        const int64_t first =
            step >= 0 ? step
            : r_.window > 0 ? static_cast<int64_t>(BelowFromBits(
                                  w.w[0], w.w[1], static_cast<uint64_t>(rec.length)))
                            : 0;
        const int64_t n = std::min<int64_t>(width_, rec.length - first);
        const int64_t offset = r_.pad_left ? width_ - n : 0;
        planned[k].push_back(i);
        planned_slots[k].push_back(d.slot[k][i]);
        start[k].push_back(first);
        valid[k].push_back(n);
        for (size_t c = 0; c < r_.columns.size(); ++c) {
          const uint64_t step = static_cast<uint64_t>(r_.columns[c].step_bytes);
          sp.remote.push_back(s.arena + s.column_offsets[c] +
                              (static_cast<uint64_t>(d.slot[k][i]) * s.max_length + first) *
                                  step);
          sp.local.push_back(reinterpret_cast<uint64_t>(out_.columns[c]) +
                             (static_cast<uint64_t>(d.rows[k][i]) * width_ + offset) * step);
          sp.sizes.push_back(static_cast<uint64_t>(n) * step);
        }
      }
      spans.push_back(std::move(sp));
    }
    // The windows read after the records read before them, and the records
    // read again after the windows (loads may pass loads on AArch64; a
    // remote read completes in order anyway).
    std::atomic_thread_fence(std::memory_order_acquire);
    reads_.Read(spans);
    std::atomic_thread_fence(std::memory_order_acquire);
    // The records again: a slot rewritten meanwhile shows another key or state.
    const std::vector<std::vector<SlotInfo>> after = reads_.Records(planned_slots);
    for (size_t k = 0; k < S; ++k) {
      for (size_t j = 0; j < planned[k].size(); ++j) {
        const size_t i = planned[k][j];
        const int64_t row = d.rows[k][i];
        const SlotInfo& before = d.before[k][i];
        if (after[k][j].key != before.key || after[k][j].state != SlotState::kLive) {
          failed.push_back(row);
          continue;
        }
        out_.keys[row] = (static_cast<int64_t>(r_.numbers[k]) << r_.shard_shift) | before.key;
        out_.start[row] = static_cast<int32_t>(start[k][j]);
        out_.probability[row] = static_cast<float>(d.weight[k][i] / d.total);
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

  Reads reads_;
  const std::vector<ShardLayout>& shards_;
  const Request& r_;
  const Outputs& out_;
  int64_t width_;
  bool ranks_;
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
  const bool ranks = StrategyOf(request.strategy).ranks;  // throws for an unknown one
  if (ranks && request.count < 1) {
    throw InvalidArgument("a one-sided TopK or Recent sample needs a count >= 1");
  }
  if (request.whole_read_bytes < 0) {
    throw InvalidArgument("a one-sided sample's whole_read_bytes must be >= 0");
  }
  for (const ShardLayout& s : shards) {
    bool ok = !s.tree_offsets.empty() && s.column_offsets.size() == request.columns.size() &&
              s.max_length == shards[0].max_length && s.capacity >= 1 && s.max_length >= 1 &&
              s.tree_nodes % kSumTreeFanout == 0 && (!ranks || s.stamps != 0);
    for (size_t level = 0; ok && level < s.tree_offsets.size(); ++level) {
      const int64_t nodes = LevelNodes(s, level);  // in order, whole lines, inside the tree
      ok = s.tree_offsets[level] >= 0 && nodes > 0 && nodes % kSumTreeFanout == 0;
    }
    if (!ok) throw InvalidArgument("a shard's layout does not match the request");
  }
  if (request.window < 0 || request.window > shards[0].max_length) {
    throw InvalidArgument("the window must be in [0, max_length]");
  }
  if (DrawsSteps(request.strategy) && request.window < 1) {
    throw InvalidArgument("a strategy that draws steps places a window there: give a window");
  }
  Sampler sampler(reader, shards, request, out);
  return sampler.Run();
}

}  // namespace gearjax::one_sided
