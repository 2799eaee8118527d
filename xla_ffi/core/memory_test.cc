// Tests of the memory hooks: releases inside a stream callback (where CUDA
// calls are not allowed) are queued, not done, and the next drain outside a
// callback does them; a table whose last reference dies in a callback releases
// nothing there; a device arena remembers its GPU and its table refuses
// programs on another.
#include "core/memory.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "core/fake_pinned.h"
#include "core/mapped_array.h"
#include "core/table.h"

namespace gearjax {
namespace {

using fake_pinned::released;
const MappedAllocator& kFake = fake_pinned::kAllocator;

class DeferredRelease : public ::testing::Test {
 protected:
  void SetUp() override {
    DrainDeferredReleases();
    released.clear();
    SetMappedAllocator(&kFake);
  }
  void TearDown() override { SetMappedAllocator(nullptr); }
};

TEST_F(DeferredRelease, OutsideACallbackMemoryGoesBackAtOnce) {
  { MappedArray<double> a(16, /*gpu_mapped=*/true); }
  EXPECT_EQ(released.size(), 1u);
  EXPECT_EQ(DeferredReleases(), 0u);
}

TEST_F(DeferredRelease, InsideACallbackReleasesWaitForTheNextDrain) {
  auto a = std::make_unique<MappedArray<double>>(16, /*gpu_mapped=*/true);
  {
    StreamCallbackScope callback;
    {
      StreamCallbackScope nested;
      a.reset();
    }
    EXPECT_EQ(DrainDeferredReleases(), 0u);  // still inside a callback
  }
  EXPECT_TRUE(released.empty());
  EXPECT_EQ(DeferredReleases(), 1u);
  EXPECT_EQ(DrainDeferredReleases(), 1u);
  EXPECT_EQ(released.size(), 1u);
  EXPECT_EQ(DeferredReleases(), 0u);
}

TEST_F(DeferredRelease, ATableDroppedInACallbackReleasesNothingThere) {
  TableSpec spec;
  spec.columns.push_back({"x", 4, std::vector<uint8_t>(4, 0)});
  spec.capacity = 4;
  spec.max_length = 2;
  spec.gpu_mapped = true;
  auto table = std::make_shared<Table>(spec);
  {
    StreamCallbackScope callback;
    table.reset();  // the last reference
  }
  EXPECT_TRUE(released.empty());
  EXPECT_GT(DeferredReleases(), 0u);  // arena, slot records, trees
  const size_t queued = DeferredReleases();
  EXPECT_EQ(DrainDeferredReleases(), queued);
  EXPECT_EQ(released.size(), queued);
}

int current_gpu = 0;
const DeviceMemory kFakeDevice{
    [](size_t bytes) -> void* { return std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096); },
    [](void* p) { std::free(p); },
    [](void* dst, const void* src, size_t n) { std::memcpy(dst, src, n); },
    [](void* dst, const void* src, size_t n) { std::memcpy(dst, src, n); },
    []() -> size_t { return size_t{1} << 30; },
    []() { return current_gpu; }};

TEST(DeviceArena, ATableInGpuMemoryServesOnlyItsGpu) {
  SetDeviceMemory(&kFakeDevice);
  current_gpu = 1;
  TableSpec spec;
  spec.columns.push_back({"x", 4, std::vector<uint8_t>(4, 0)});
  spec.capacity = 2;
  spec.max_length = 2;
  spec.on_device = true;
  Table table(spec);
  current_gpu = 0;
  table.CheckDevice(1);
  try {
    table.CheckDevice(0);
    ADD_FAILURE() << "a program on GPU 0 used GPU 1's table";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("GPU 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("runs on GPU 0"), std::string::npos) << e.what();
  }
  spec.on_device = false;
  Table host(spec);
  host.CheckDevice(0);  // host arenas serve every GPU
  host.CheckDevice(3);
  SetDeviceMemory(nullptr);
}

}  // namespace
}  // namespace gearjax
