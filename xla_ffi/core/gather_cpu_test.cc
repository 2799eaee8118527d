// Tests of the CPU gather: each row's real steps land on the padding side's
// far end, the padding holds the column's pad value, and the mask and
// timesteps (written only when asked for) name the steps the row holds.
#include "core/gather_cpu.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace gearjax {
namespace {

constexpr int64_t kMaxLength = 8;
constexpr int32_t kPad = -7;

// A table of one int32 column whose step i holds 100 * trajectory + i, for
// trajectories of 1, 3 and 8 steps.
std::unique_ptr<Table> Filled() {
  TableSpec spec;
  spec.name = "gather";
  const int32_t pad = kPad;
  const auto* pad_bytes = reinterpret_cast<const uint8_t*>(&pad);
  spec.columns.push_back({"x", 4, std::vector<uint8_t>(pad_bytes, pad_bytes + 4)});
  spec.capacity = 4;
  spec.max_length = kMaxLength;
  auto table = std::make_unique<Table>(spec);
  int32_t trajectory = 0;
  for (int64_t length : {1, 3, 8}) {
    std::vector<int32_t> steps(static_cast<size_t>(length));
    for (int64_t i = 0; i < length; ++i) steps[i] = 100 * trajectory + static_cast<int32_t>(i);
    table->Insert({steps.data()}, length, 1.0);
    ++trajectory;
  }
  return table;
}

struct Gathered {
  std::vector<Draw> draws;
  std::vector<int64_t> keys, table_size;
  std::vector<int32_t> start, valid, x, timestep;
  std::vector<float> probability;
  std::vector<uint8_t> mask;  // bool storage (vector<bool> has no data())
};

Gathered Gather(Table& table, int64_t batch, int64_t width, bool pad_left, bool steps) {
  Gathered g;
  g.draws.resize(batch);
  const uint32_t seed[2] = {3, 4};
  const uint64_t ticket =
      table.Select({Strategy::kUniform, 0, 0, batch, width, Cut::kStart, true}, seed,
                   g.draws.data());
  g.keys.resize(batch), g.table_size.resize(batch), g.start.resize(batch), g.valid.resize(batch);
  g.probability.resize(batch), g.x.resize(batch * width);
  g.mask.assign(batch * width, 2), g.timestep.assign(batch * width, -1);  // unwritten marks
  SampleOutputs out{g.keys.data(), g.start.data(), g.probability.data(), g.table_size.data(),
                    g.valid.data(), {reinterpret_cast<uint8_t*>(g.x.data())}};
  if (steps) {
    out.mask = reinterpret_cast<bool*>(g.mask.data());
    out.timestep = g.timestep.data();
  }
  GatherRows(table, g.draws.data(), 0, batch, width, pad_left, out);
  table.EndSample(ticket);
  return g;
}

TEST(GatherRows, MaskAndTimestepsNameTheStepsEachRowHolds) {
  auto table = Filled();
  constexpr int64_t kBatch = 64, kWidth = 5;
  for (bool pad_left : {false, true}) {
    const Gathered g = Gather(*table, kBatch, kWidth, pad_left, /*steps=*/true);
    bool padded = false;
    for (int64_t b = 0; b < kBatch; ++b) {
      const int64_t offset = pad_left ? kWidth - g.valid[b] : 0;
      padded |= g.valid[b] < kWidth;
      for (int64_t w = 0; w < kWidth; ++w) {
        const int64_t i = b * kWidth + w;
        const bool real = w >= offset && w < offset + g.valid[b];
        EXPECT_EQ(g.mask[i], real ? 1 : 0) << "row " << b << " step " << w;
        EXPECT_EQ(g.timestep[i], real ? g.start[b] + (w - offset) : 0);
        // The step the timestep names is the one gathered there.
        if (real) {
          EXPECT_EQ(g.x[i] % 100, g.timestep[i]);
        } else {
          EXPECT_EQ(g.x[i], kPad);
        }
      }
    }
    EXPECT_TRUE(padded);  // short trajectories pad their rows
  }
}

TEST(GatherRows, LeavesMaskAndTimestepsAloneWhenNotAsked) {
  auto table = Filled();
  const Gathered g = Gather(*table, 16, 4, /*pad_left=*/false, /*steps=*/false);
  for (uint8_t m : g.mask) EXPECT_EQ(m, 2);
  for (int32_t t : g.timestep) EXPECT_EQ(t, -1);
}

}  // namespace
}  // namespace gearjax
