// Tests of the GPU gather's plan (gather_plan.h): a grid the kernel cannot
// launch, or whose blocks one 32-bit completion counter cannot count, is
// refused with what to change, where it would otherwise never report its end.
#include "core/gpu/gather_plan.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/table/table.h"

namespace gearjax {
namespace {

Table MakeTable(int columns, int64_t step_bytes) {
  TableSpec spec;
  spec.name = "plan";
  for (int c = 0; c < columns; ++c) {
    spec.columns.push_back({"c" + std::to_string(c), step_bytes,
                            std::vector<uint8_t>(static_cast<size_t>(step_bytes), 0)});
  }
  spec.capacity = 4;
  spec.max_length = 8;
  return Table(spec);
}

SampleOutputs Outputs(int columns) {
  SampleOutputs out{};
  out.columns.assign(static_cast<size_t>(columns), nullptr);  // never written here
  return out;
}

TEST(CheckGatherGrid, BlocksPastTheCompletionCounterAreRefused) {
  Table table = MakeTable(8, 4);
  const SampleOutputs out = Outputs(8);
  // 2^29 rows x 8 columns x 1 part = 2^32 blocks: one more than the counter.
  try {
    PlanGather(table, nullptr, int64_t{1} << 29, 4, false, out, nullptr);
    FAIL() << "a grid of 2^32 blocks was planned";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("536870912 x 8 columns x 1 parts"), std::string::npos) << message;
    EXPECT_NE(message.find("sample fewer rows per call"), std::string::npos) << message;
  }
  // One row fewer per column fits.
  const GatherParams fits =
      PlanGather(table, nullptr, (int64_t{1} << 29) - 1, 4, false, out, nullptr);
  EXPECT_EQ(fits.batch, (int64_t{1} << 29) - 1);
}

TEST(CheckGatherGrid, RowsAndPartsPastALaunchAreRefused) {
  Table one = MakeTable(1, 4);
  const SampleOutputs out = Outputs(1);
  EXPECT_THROW(PlanGather(one, nullptr, kMaxGatherRows + 1, 1, false, out, nullptr),
               InvalidArgument);
  EXPECT_NO_THROW(PlanGather(one, nullptr, kMaxGatherRows, 1, false, out, nullptr));
  // A step of 64 KiB: each window step is parts of its own.
  Table wide = MakeTable(1, int64_t{1} << 16);
  GatherParams p = PlanGather(wide, nullptr, 1, 1, false, out, nullptr);
  p.width = (kMaxGatherParts + 1) * kBytesPerGatherBlock / p.columns[0].step_bytes;
  ASSERT_GT(GatherParts(p), kMaxGatherParts);
  EXPECT_THROW(CheckGatherGrid(p), InvalidArgument);
}

}  // namespace
}  // namespace gearjax
