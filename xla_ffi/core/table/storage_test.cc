// Tests of the column layout and the host arena.
#include "core/table/storage.h"

#include <gtest/gtest.h>

#include <cstring>

#include "core/common.h"

namespace gearjax {
namespace {

std::vector<ColumnSpec> Columns() {
  return {{"obs", 12, std::vector<uint8_t>(12, 0)}, {"r", 1, std::vector<uint8_t>(1, 7)}};
}

TEST(ColumnLayout, PlacesColumnsAlignedAndPadStepsAfterThem) {
  const ColumnLayout layout(Columns(), 5, 3);
  EXPECT_EQ(layout.column_offset(0), 0u);
  EXPECT_EQ(layout.column_offset(1), 256u);  // 5 * 3 * 12 = 180, rounded up
  EXPECT_EQ(layout.pad_offset(0), 256u + 15u);
  EXPECT_EQ(layout.pad_offset(1), 256u + 15u + 12u);
  EXPECT_EQ(layout.arena_bytes(), 256u + 15u + 13u);
  EXPECT_EQ(layout.StepOffset(0, 2, 1), (2u * 3u + 1u) * 12u);
  EXPECT_TRUE(layout.pad_is_one_byte(0));
}

TEST(ColumnLayout, RefusesWhatCannotBeAddressed) {
  EXPECT_THROW(ColumnLayout({}, 1, 1), InvalidArgument);
  EXPECT_THROW(ColumnLayout(Columns(), 0, 1), InvalidArgument);
  EXPECT_THROW(ColumnLayout(Columns(), (int64_t{1} << 31) + 1, 1), InvalidArgument);
  EXPECT_THROW(ColumnLayout(Columns(), 1, (int64_t{1} << 31) + 1), InvalidArgument);
  EXPECT_THROW(ColumnLayout({{"x", 1 << 20, std::vector<uint8_t>(1 << 20)}}, int64_t{1} << 31,
                            int64_t{1} << 31),
               InvalidArgument);
  EXPECT_THROW(ColumnLayout({{"x", 4, std::vector<uint8_t>(3)}}, 1, 1), InvalidArgument);
  EXPECT_THROW(ColumnLayout({{"x", 0, {}}}, 1, 1), InvalidArgument);
}

TEST(Arena, HostArenasReadBackWhatWasWritten) {
  Arena arena(64, /*gpu_mapped=*/false, /*on_device=*/false);
  ASSERT_NE(arena.host_data(), nullptr);
  EXPECT_EQ(arena.device_data(), nullptr);
  const char text[] = "trajectory";
  arena.Write(5, text, sizeof(text));
  char back[sizeof(text)];
  arena.Read(back, 5, sizeof(text));
  EXPECT_STREQ(back, text);
  arena.Release();
  EXPECT_EQ(arena.host_data(), nullptr);
}

TEST(Arena, DeviceArenasNeedGpuMemory) {
  EXPECT_THROW(Arena(64, false, /*on_device=*/true), InvalidArgument);
}

}  // namespace
}  // namespace gearjax
