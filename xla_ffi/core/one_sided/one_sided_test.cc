// Tests of the native one-sided sampler (one_sided.h) over tables of this
// process read by memcpy: the distribution over shards and slots, every
// window's content and padding, global keys, the round trips of both read
// paths (snapshot, or per row for shards too large), the ranking strategies
// (TopK, Recent) over every shard, rows drawn again when their slot is
// rewritten during the sample, and refusals.
#include "core/one_sided/one_sided.h"
#include "core/one_sided/one_sided_draw.h"
#include "core/one_sided/one_sided_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "core/table/table.h"

namespace gearjax::one_sided {
namespace {

TableSpec Spec(int64_t capacity) {
  TableSpec spec;
  spec.name = "shard";
  spec.columns.push_back({"x", 4, std::vector<uint8_t>{0xff, 0xff, 0xff, 0xff}});  // pad -1
  spec.capacity = capacity;
  spec.max_length = 12;
  spec.key_bits = 61;
  return spec;
}

ShardLayout Layout(Table& table, Strategy strategy, double alpha) {
  const RemoteLayout r = table.Remote({strategy, alpha, 0, 1, 0});
  const RemoteLayout u = table.Remote({Strategy::kUniform, 0.0, 0, 1, 0});
  ShardLayout s;
  s.arena = reinterpret_cast<uint64_t>(r.arena);
  s.column_offsets = {static_cast<uint64_t>(table.column_offset(0))};
  s.slots = reinterpret_cast<uint64_t>(r.slots);
  s.capacity = table.spec().capacity;
  s.tree = reinterpret_cast<uint64_t>(r.tree.nodes);
  s.tree_offsets.assign(r.tree.offsets, r.tree.offsets + r.tree.levels);
  s.tree_nodes = static_cast<int64_t>(r.tree_nodes);
  s.uniform_root = reinterpret_cast<uint64_t>(u.tree.nodes + u.tree.offsets[u.tree.levels - 1]);
  s.max_length = table.spec().max_length;
  s.stamps = reinterpret_cast<uint64_t>(u.stamps);
  return s;
}

// Shard k's trajectory i holds 1000 k + i + 100000 t at step t; priority 1 + i % 5.
struct Shards {
  std::vector<std::unique_ptr<Table>> tables;
  std::map<int64_t, std::pair<double, int64_t>> items;  // global key -> (priority, length)
  std::vector<int64_t> order;  // global keys, oldest first
};

// Inserts shard k's trajectory i (as Shards describes it); returns its key.
int64_t InsertItem(Shards& s, size_t k, int64_t i) {
  const int64_t length = 1 + (i * 7 + static_cast<int64_t>(k)) % 12;
  std::vector<int32_t> data(static_cast<size_t>(length));
  for (int64_t t = 0; t < length; ++t) data[t] = static_cast<int32_t>(1000 * k + i + 100000 * t);
  const int64_t key = s.tables[k]->Insert({data.data()}, length, 1.0 + i % 5);
  s.items[(static_cast<int64_t>(k) << 61) | key] = {1.0 + i % 5, length};
  s.order.push_back((static_cast<int64_t>(k) << 61) | key);
  return key;
}

Shards Make(const std::vector<int64_t>& sizes, int64_t capacity_extra = 0) {
  Shards s;
  for (size_t k = 0; k < sizes.size(); ++k) {
    s.tables.push_back(std::make_unique<Table>(Spec(sizes[k] + capacity_extra)));
    for (int64_t i = 0; i < sizes[k]; ++i) InsertItem(s, k, i);
  }
  return s;
}

// Every shard's layout for one strategy, in shard order.
std::vector<ShardLayout> Layouts(const Shards& s, Strategy strategy, double alpha) {
  std::vector<ShardLayout> out;
  for (const auto& table : s.tables) out.push_back(Layout(*table, strategy, alpha));
  return out;
}

struct Batch {
  std::vector<int64_t> keys, table_size;
  std::vector<int32_t> start, valid, shard, x;
  std::vector<float> probability;
  Outputs out;
  Batch(int64_t batch, int64_t width)
      : keys(batch), table_size(batch), start(batch), valid(batch), shard(batch),
        x(batch * width), probability(batch) {
    out = {keys.data(), start.data(), probability.data(), table_size.data(), valid.data(),
           shard.data(), {reinterpret_cast<uint8_t*>(x.data())}};
  }
};

Request MakeRequest(int64_t batch, int64_t window, bool pad_left, uint32_t seed) {
  Request r;
  r.numbers = {0, 1};
  r.shard_shift = 61;
  r.columns = {{4, {0xff, 0xff, 0xff, 0xff}}};
  r.seed[0] = seed;
  r.seed[1] = 12345;
  r.batch = batch;
  r.window = window;
  r.pad_left = pad_left;
  return r;
}

void CheckRows(const Shards& s, const Batch& b, int64_t batch, int64_t width, bool pad_left) {
  for (int64_t row = 0; row < batch; ++row) {
    const auto it = s.items.find(b.keys[row]);
    ASSERT_NE(it, s.items.end()) << "row " << row;
    const int64_t length = it->second.second;
    const int64_t n = b.valid[row];
    ASSERT_EQ(n, std::min<int64_t>(width, length - b.start[row]));
    const int64_t shard = b.keys[row] >> 61;
    EXPECT_EQ(b.shard[row], shard);
    const int32_t* x = &b.x[row * width];
    const int64_t offset = pad_left ? width - n : 0;
    for (int64_t t = 0; t < width; ++t) {
      if (t >= offset && t < offset + n) {
        EXPECT_EQ((x[t] / 100000), b.start[row] + (t - offset)) << "row " << row;
        EXPECT_EQ(x[t] % 100000 / 1000, shard) << "row " << row;
      } else {
        EXPECT_EQ(x[t], -1) << "padding, row " << row;
      }
    }
  }
}

TEST(OneSided, RowsFollowPriorityToTheAlphaOverShardsOfUnequalSize) {
  for (const double alpha : {0.0, 1.0, 2.0}) {
    Shards s = Make({70, 30});
    std::vector<ShardLayout> shards = Layouts(s, Strategy::kPrioritized, alpha);
    CopyReader reader;
    std::map<int64_t, int64_t> counts;
    const int64_t batch = 256, width = 4;
    int64_t drawn = 0;
    for (uint32_t seed = 0; seed < 40; ++seed) {
      Batch b(batch, width);
      const Request r = MakeRequest(batch, width, seed % 2 == 0, seed);
      const Counts c = Sample(reader, shards, r, b.out);
      EXPECT_EQ(c.round_trips, 3);  // snapshot, windows, records
      CheckRows(s, b, batch, width, seed % 2 == 0);
      for (int64_t row = 0; row < batch; ++row) {
        ++counts[b.keys[row]];
        EXPECT_EQ(b.table_size[row], 100);
      }
      drawn += batch;
    }
    double weight_sum = 0.0;
    for (const auto& [key, item] : s.items) weight_sum += std::pow(item.first, alpha);
    double chi2 = 0.0;
    for (const auto& [key, item] : s.items) {
      const double expected = drawn * std::pow(item.first, alpha) / weight_sum;
      const double d = counts[key] - expected;
      chi2 += d * d / expected;
    }
    // 99 degrees of freedom: the 0.9999 quantile is about 157.
    EXPECT_LT(chi2, 157.0) << "alpha " << alpha;
  }
}

TEST(OneSided, ProbabilitiesAreEachRowsWeightOverTheTotal) {
  Shards s = Make({10, 5});
  std::vector<ShardLayout> shards = Layouts(s, Strategy::kPrioritized, 1.0);
  double total = 0.0;
  for (const auto& [key, item] : s.items) total += item.first;
  CopyReader reader;
  Batch b(64, 0 + 12);
  Sample(reader, shards, MakeRequest(64, 0, false, 7), b.out);
  for (int64_t row = 0; row < 64; ++row) {
    EXPECT_FLOAT_EQ(b.probability[row], s.items[b.keys[row]].first / total);
    EXPECT_EQ(b.start[row], 0);  // window 0: whole trajectories
    EXPECT_EQ(b.valid[row], s.items[b.keys[row]].second);
  }
}

// PrioritizedSteps: each row's step (where its window starts) in proportion
// to the step's priority ** alpha over every shard's steps, read down the
// owners' step trees (a leaf per step of every slot); the probability is the
// step's weight over the total, the window holds the steps it names.
TEST(OneSided, PrioritizedStepsDrawStepsByTheirWeightOverEveryShard) {
  Shards s;
  std::map<std::pair<int64_t, int64_t>, double> weight;  // (global key, step) -> weight
  const double alpha = 0.5;
  double total = 0.0;
  for (size_t k = 0; k < 2; ++k) {
    TableSpec spec = Spec(8);
    spec.step_priorities = true;
    s.tables.push_back(std::make_unique<Table>(spec));
    for (int64_t i = 0; i < 3 + 2 * static_cast<int64_t>(k); ++i) {
      const int64_t length = 2 + (i * 5 + static_cast<int64_t>(k)) % 11;
      std::vector<int32_t> data(static_cast<size_t>(length));
      std::vector<double> steps(static_cast<size_t>(length));
      for (int64_t t = 0; t < length; ++t) {
        data[t] = static_cast<int32_t>(1000 * k + i + 100000 * t);
        steps[t] = (i + t) % 4 == 0 ? 0.0 : 0.5 + static_cast<double>((3 * i + t + k) % 5);
      }
      const double largest = *std::max_element(steps.begin(), steps.end());
      const int64_t key = s.tables[k]->Insert({data.data()}, length, largest, -1, -1, -1,
                                              steps.data());
      const int64_t global = (static_cast<int64_t>(k) << 61) | key;
      s.items[global] = {largest, length};
      for (int64_t t = 0; t < length; ++t) {
        weight[{global, t}] = steps[t] > 0 ? std::pow(steps[t], alpha) : 0.0;
        total += weight[{global, t}];
      }
    }
  }
  std::vector<ShardLayout> shards;
  for (const auto& table : s.tables) {
    ShardLayout layout = Layout(*table, Strategy::kUniform, 0.0);
    const RemoteLayout r = table->Remote({Strategy::kPrioritizedSteps, alpha, 0, 1, 1});
    layout.tree = reinterpret_cast<uint64_t>(r.tree.nodes);
    layout.tree_offsets.assign(r.tree.offsets, r.tree.offsets + r.tree.levels);
    layout.tree_nodes = static_cast<int64_t>(r.tree_nodes);
    shards.push_back(layout);
  }
  CopyReader reader;
  std::map<std::pair<int64_t, int64_t>, int64_t> counts;
  const int64_t batch = 512, width = 3;
  int64_t drawn = 0;
  for (uint32_t seed = 0; seed < 20; ++seed) {
    Batch b(batch, width);
    Request r = MakeRequest(batch, width, seed % 2 == 0, seed);
    r.strategy = Strategy::kPrioritizedSteps;
    Sample(reader, shards, r, b.out);
    CheckRows(s, b, batch, width, seed % 2 == 0);
    for (int64_t row = 0; row < batch; ++row) {
      const std::pair<int64_t, int64_t> cell{b.keys[row], b.start[row]};
      ASSERT_GT(weight[cell], 0.0) << "drew a step of priority 0";
      EXPECT_FLOAT_EQ(b.probability[row], weight[cell] / total);
      ++counts[cell];
    }
    drawn += batch;
  }
  double chi2 = 0.0;
  int cells = 0;
  for (const auto& [cell, w] : weight) {
    if (w == 0.0) continue;
    const double expected = drawn * w / total;
    const double d = counts[cell] - expected;
    chi2 += d * d / expected;
    ++cells;
  }
  // About 40 cells: 2 x cells + 10 is above the chi-square's 0.9999 quantile
  // (86 for 42 degrees of freedom); a draw off by a step fails far above it.
  EXPECT_LT(chi2, 2.0 * cells + 10.0) << cells << " cells";
  Request no_window = MakeRequest(4, 0, false, 1);
  no_window.strategy = Strategy::kPrioritizedSteps;
  Batch b(4, 12);
  EXPECT_THROW(Sample(reader, shards, no_window, b.out), InvalidArgument);
}

// Counts round trips: a reader that copies, as CopyReader, but counts, and
// keeps the spans of the reads marked fixed.
class CountingReader : public CopyReader {
 public:
  nixl::ReadResult Read(const std::vector<ShardLayout>& shards,
                        const std::vector<ShardSpans>& spans, bool fixed) override {
    ++reads;
    if (fixed) {
      fixed_reads.emplace_back(reads, std::vector<std::vector<uint64_t>>{});
      for (const ShardSpans& s : spans) {
        for (const auto* v : {&s.remote, &s.local, &s.sizes}) {
          fixed_reads.back().second.push_back(*v);
        }
      }
    }
    return CopyReader::Read(shards, spans, fixed);
  }
  int reads = 0;
  // (which read, 1 first; every shard's remote, local and sizes)
  std::vector<std::pair<int, std::vector<std::vector<uint64_t>>>> fixed_reads;
};

TEST(OneSided, OnlyTheSnapshotIsMarkedFixedAndItsSpansAreTheSameEverySample) {
  Shards s = Make({50, 70}, 5);
  std::vector<ShardLayout> shards = Layouts(s, Strategy::kPrioritized, 1.0);
  CountingReader reader;
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    Batch b(64, 4);
    Sample(reader, shards, MakeRequest(64, 4, false, seed), b.out);
    CheckRows(s, b, 64, 4, false);
  }
  // Three round trips a sample, the first of each the snapshot.
  ASSERT_EQ(reader.reads, 9);
  ASSERT_EQ(reader.fixed_reads.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(reader.fixed_reads[i].first, static_cast<int>(3 * i + 1));
    EXPECT_EQ(reader.fixed_reads[i].second, reader.fixed_reads[0].second);
  }
  // The table changes (an insert), the layout does not: still the same spans.
  const std::vector<int32_t> data = {7, 8, 9};
  s.tables[1]->Insert({data.data()}, 3, 2.0);
  Batch b(64, 4);
  Sample(reader, shards, MakeRequest(64, 4, false, 9), b.out);
  ASSERT_EQ(reader.fixed_reads.size(), 4u);
  EXPECT_EQ(reader.fixed_reads[3].second, reader.fixed_reads[0].second);
}

TEST(OneSided, ASampleIsThreeRoundTripsWhereShardsFitAndMoreWhereTheyDoNot) {
  Shards small = Make({50, 50});
  std::vector<ShardLayout> shards = Layouts(small, Strategy::kUniform, 0);
  CountingReader reader;
  Batch b(128, 4);
  const Counts c = Sample(reader, shards, MakeRequest(128, 4, false, 1), b.out);
  EXPECT_EQ(reader.reads, 3);
  EXPECT_EQ(c.round_trips, 3);
  // The windows, and per shard: its tree's levels, its size, its records twice.
  const int64_t levels = static_cast<int64_t>(shards[0].tree_offsets.size());
  EXPECT_EQ(c.descriptors, 128 + 2 * (levels + 1 + 2));
  // Records over 1 MiB (40000 slots) and a tree over 1 MiB (150000 leaves):
  // read per row.
  Shards large = Make({200, 200}, 150000);
  shards = Layouts(large, Strategy::kUniform, 0);
  CountingReader per_row;
  Batch l(128, 4);
  const Counts d = Sample(per_row, shards, MakeRequest(128, 4, true, 2), l.out);
  CheckRows(large, l, 128, 4, true);
  EXPECT_GT(d.round_trips, 4);
  EXPECT_GT(d.descriptors, 3 * 128);
}

TEST(OneSided, BadRequestsAndLayoutsAreRefused) {
  Shards s = Make({5, 5});
  std::vector<ShardLayout> shards = Layouts(s, Strategy::kUniform, 0);
  CopyReader reader;
  Batch b(8, 4);
  Request r = MakeRequest(8, 4, false, 1);
  r.numbers = {0};
  EXPECT_THROW(Sample(reader, shards, r, b.out), InvalidArgument);
  r = MakeRequest(8, 13, false, 1);  // window past max_length
  EXPECT_THROW(Sample(reader, shards, r, b.out), InvalidArgument);
  std::vector<ShardLayout> bad = shards;
  bad[1].tree_offsets = {8, 0};
  EXPECT_THROW(Sample(reader, bad, MakeRequest(8, 4, false, 1), b.out), InvalidArgument);
  bad = shards;
  bad[0].tree_nodes -= 8;
  EXPECT_THROW(Sample(reader, bad, MakeRequest(8, 4, false, 1), b.out), InvalidArgument);
  Shards empty = Make({0, 0}, 4);
  shards = Layouts(empty, Strategy::kUniform, 0);
  EXPECT_THROW(Sample(reader, shards, MakeRequest(8, 4, false, 1), b.out), InvalidArgument);
}

TEST(OneSided, ALayoutWhoseLevelsDoNotNestReadsNothingPastALevel) {
  // A peer's layout whose leaf level is one line while the level above has
  // more: a descent from the level above would read past the leaves (in the
  // snapshot's staging buffer, where it holds them; AddressSanitizer sees
  // it). Such rows are dead and drawn again, or the sample fails; every row
  // returned is a stored trajectory.
  Shards s = Make({100});
  std::vector<ShardLayout> shards = Layouts(s, Strategy::kUniform, 0);
  ASSERT_GE(shards[0].tree_offsets.size(), 3u);
  ASSERT_GT(LevelNodes(shards[0], 0), 8);
  shards[0].tree_offsets[1] = shards[0].tree_offsets[0] + 8;
  // Held: every level fits the snapshot, the records do not, so the leaf
  // level ends the staging buffer (but for the 8 bytes of the uniform root).
  const int64_t held = 8 * shards[0].tree_nodes;
  ASSERT_LT(held, 100 * static_cast<int64_t>(sizeof(SlotInfo)));
  CopyReader reader;
  for (int64_t whole_read_bytes : {int64_t{0}, held}) {  // lines read, or held
    Batch b(64, 4);
    Request r = MakeRequest(64, 4, false, 3);
    r.numbers = {0};
    r.whole_read_bytes = whole_read_bytes;
    try {
      Sample(reader, shards, r, b.out);
    } catch (const std::exception&) {
      continue;  // refused: fine, as long as nothing was read past a level
    }
    for (int64_t key : b.keys) EXPECT_TRUE(s.items.count(key)) << key;
  }
}

TEST(OneSided, AReaderThatFailsNamesItsShard) {
  Shards s = Make({5, 5});
  std::vector<ShardLayout> shards = Layouts(s, Strategy::kUniform, 0);
  shards[1].peer = "elsewhere";  // a CopyReader cannot reach it
  CopyReader reader;
  Batch b(8, 4);
  try {
    Sample(reader, shards, MakeRequest(8, 4, false, 1), b.out);
    FAIL() << "read another process's shard by memcpy";
  } catch (const ShardUnavailable& e) {
    EXPECT_EQ(e.shard, 1);
  }
}

Request Ranked(Strategy strategy, int64_t count, int64_t batch, uint32_t seed) {
  Request r = MakeRequest(batch, 4, false, seed);
  r.strategy = strategy;
  r.count = count;
  return r;
}

// Draws rows and counts them by key; checks every row's window and fields.
std::map<int64_t, int64_t> Draws(const Shards& s, const std::vector<ShardLayout>& shards,
                                 const Request& r, int samples, Counts* counts = nullptr) {
  std::map<int64_t, int64_t> drawn;
  CopyReader reader;
  for (int i = 0; i < samples; ++i) {
    Request ri = r;
    ri.seed[0] += static_cast<uint32_t>(i);
    Batch b(r.batch, 4);
    const Counts c = Sample(reader, shards, ri, b.out);
    if (counts != nullptr) *counts = c;
    CheckRows(s, b, r.batch, 4, false);
    for (int64_t row = 0; row < r.batch; ++row) {
      ++drawn[b.keys[row]];
      EXPECT_EQ(b.table_size[row], static_cast<int64_t>(s.items.size()));
    }
  }
  return drawn;
}

TEST(OneSided, TopKAndRecentDrawUniformlyAmongTheBestOfEveryShard) {
  // Shard 1's items were inserted after shard 0's: newer stamps.
  Shards s = Make({20, 12});
  std::vector<ShardLayout> shards = Layouts(s, Strategy::kUniform, 0);
  // Recent(14): shard 1's 12 and shard 0's newest 2.
  const std::vector<int64_t>& order = s.order;
  const std::vector<int64_t> newest(order.end() - 14, order.end());
  Counts c;
  std::map<int64_t, int64_t> drawn = Draws(s, shards, Ranked(Strategy::kRecent, 14, 256, 1), 20, &c);
  EXPECT_EQ(c.round_trips, 3);  // the ranking read, the windows, the records again
  ASSERT_EQ(drawn.size(), newest.size());
  double chi2 = 0.0;
  for (int64_t key : newest) {
    ASSERT_EQ(drawn.count(key), 1u) << key;
    const double expected = 20.0 * 256 / 14, d = drawn[key] - expected;
    chi2 += d * d / expected;
  }
  EXPECT_LT(chi2, 45.0);  // 13 degrees of freedom: the 0.9999 quantile is about 42
  // TopK(3): priority 5 (i % 5 == 4) is i = 4, 9, 14, 19 in shard 0 and 4, 9
  // in shard 1; the newest first: shard 1's two, then shard 0's i = 19.
  drawn = Draws(s, shards, Ranked(Strategy::kTopK, 3, 64, 2), 5);
  ASSERT_EQ(drawn.size(), 3u);
  for (const int64_t key : {order[19], order[20 + 4], order[20 + 9]}) {
    EXPECT_EQ(drawn.count(key), 1u) << key;
  }
  // A count past the live items: every item.
  drawn = Draws(s, shards, Ranked(Strategy::kTopK, 1000, 256, 3), 4);
  EXPECT_EQ(drawn.size(), s.items.size());
}

TEST(OneSided, RankedProbabilitiesAreOneOverTheBestAndEmptyShardsRefuse) {
  Shards s = Make({6, 3});
  std::vector<ShardLayout> shards = Layouts(s, Strategy::kUniform, 0);
  CopyReader reader;
  Batch b(32, 4);
  Sample(reader, shards, Ranked(Strategy::kRecent, 4, 32, 1), b.out);
  for (int64_t row = 0; row < 32; ++row) EXPECT_FLOAT_EQ(b.probability[row], 0.25f);
  Request r = Ranked(Strategy::kTopK, 0, 32, 1);  // no count
  EXPECT_THROW(Sample(reader, shards, r, b.out), InvalidArgument);
  std::vector<ShardLayout> no_stamps = shards;
  no_stamps[1].stamps = 0;
  EXPECT_THROW(Sample(reader, no_stamps, Ranked(Strategy::kTopK, 2, 32, 1), b.out),
               InvalidArgument);
  r = Ranked(Strategy::kTopK, 2, 32, 1);
  r.strategy = static_cast<Strategy>(99);
  EXPECT_THROW(Sample(reader, shards, r, b.out), InvalidArgument);
  Shards empty = Make({0, 0}, 4);
  shards = Layouts(empty, Strategy::kUniform, 0);
  try {
    Sample(reader, shards, Ranked(Strategy::kRecent, 2, 32, 1), b.out);
    FAIL() << "sampled empty shards";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("every shard is empty"), std::string::npos);
  }
}

TEST(OneSided, ARankedSampleSkipsRecordsWhosePriorityNoOwnerStores) {
  Shards s = Make({6, 6});
  std::vector<ShardLayout> shards = Layouts(s, Strategy::kUniform, 0);
  // Shard 1's records as a hostile or torn read would show them: its best
  // item's priority NaN, another's past the limit.
  const auto* live = reinterpret_cast<const SlotInfo*>(shards[1].slots);
  std::vector<SlotInfo> records(live, live + shards[1].capacity);
  int64_t changed = 0;
  for (SlotInfo& r : records) {
    if (r.state != SlotState::kLive || r.priority < 4.0) continue;
    r.priority = changed++ == 0 ? std::nan("") : 1e300;
  }
  ASSERT_EQ(changed, 2);  // i = 3, 4 (priorities 4 and 5)
  shards[1].slots = reinterpret_cast<uint64_t>(records.data());
  std::map<int64_t, int64_t> drawn;
  CopyReader reader;
  Batch b(256, 4);
  Sample(reader, shards, Ranked(Strategy::kTopK, 100, 256, 1), b.out);
  for (int64_t row = 0; row < 256; ++row) {
    ++drawn[b.keys[row]];
    EXPECT_EQ(b.table_size[row], 10);  // 12 live, 2 refused
  }
  EXPECT_EQ(drawn.size(), 10u);
  EXPECT_EQ(drawn.count(s.order[6 + 3]) + drawn.count(s.order[6 + 4]), 0u);
}

// A reader that, at its `at`-th read (the windows), inserts into shard 1,
// which is full: the remover rewrites its oldest slot with a new key while
// the sample is reading it, as an owner would.
class RewritingReader : public CopyReader {
 public:
  RewritingReader(Shards& s, int at) : s_(s), at_(at) {}
  nixl::ReadResult Read(const std::vector<ShardLayout>& shards,
                        const std::vector<ShardSpans>& spans, bool fixed) override {
    if (++reads == at_) inserted = InsertItem(s_, 1, 100 + reads);
    return CopyReader::Read(shards, spans, fixed);
  }
  int reads = 0;
  int64_t inserted = -1;  // the key inserted (its slot's old item is gone)

 private:
  Shards& s_;
  int at_;
};

TEST(OneSided, ARowWhoseSlotIsRewrittenDuringTheSampleIsDrawnAgain) {
  for (const Strategy strategy : {Strategy::kUniform, Strategy::kTopK}) {
    Shards s = Make({4, 4});  // full: capacity 4 each
    const int64_t oldest = s.order[4];  // shard 1's first
    std::vector<ShardLayout> shards = Layouts(s, Strategy::kUniform, 0);
    RewritingReader reader(s, 2);  // the snapshot (or ranking read), then the windows
    Batch b(256, 4);
    Request r = Ranked(strategy, 100, 256, 5);
    const Counts c = Sample(reader, shards, r, b.out);
    EXPECT_GT(c.round_trips, 3) << "no row drew the rewritten slot";
    s.items.erase(oldest);
    CheckRows(s, b, 256, 4, false);  // the evicted item's key is in no row
  }
}

TEST(OneSidedPlan, SamplesSkipsADeadShardOrNamesItAndClosesForGood) {
  Shards s = Make({10, 10});
  std::vector<ShardLayout> shards = Layouts(s, Strategy::kUniform, 0);
  const uint32_t seed[2] = {1, 2};
  Batch b(16, 4);
  const int64_t live = RegisterPlan(std::make_shared<Plan>(
      nullptr, shards, MakeRequest(16, 4, false, 0), 1.0, false));
  LookUpPlan(live)->Sample(seed, b.out);
  CheckRows(s, b, 16, 4, false);
  shards[1].peer = "elsewhere";  // unreachable by copying: as a dead owner
  const int64_t strict = RegisterPlan(std::make_shared<Plan>(
      nullptr, shards, MakeRequest(16, 4, false, 0), 1.0, false));
  try {
    LookUpPlan(strict)->Sample(seed, b.out);
    FAIL() << "sampled an unreachable shard";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("shard 1 is unavailable"), std::string::npos);
  }
  const int64_t skipping = RegisterPlan(std::make_shared<Plan>(
      nullptr, shards, MakeRequest(16, 4, false, 0), 1.0, true));
  for (int i = 0; i < 2; ++i) {
    LookUpPlan(skipping)->Sample(seed, b.out);
    for (int64_t row = 0; row < 16; ++row) EXPECT_EQ(b.shard[row], 0);
  }
  EXPECT_EQ(LookUpPlan(skipping)->lost(), std::vector<int>({1}));
  EXPECT_EQ(ClosePlan(skipping), std::vector<int>({1}));
  EXPECT_THROW(LookUpPlan(skipping), InvalidArgument);
  std::shared_ptr<Plan> held = LookUpPlan(live);  // a program mid-call holds it
  ClosePlan(live);
  EXPECT_THROW(held->Sample(seed, b.out), Closed);
  ClosePlan(strict);
  EXPECT_TRUE(ClosePlan(strict).empty());  // twice: nothing
}

}  // namespace
}  // namespace gearjax::one_sided
