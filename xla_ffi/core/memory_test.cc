// Tests of the memory hooks: releases inside a stream callback (where CUDA
// calls are not allowed) are queued, not done, and the next drain outside a
// callback does them; a table whose last reference dies in a callback releases
// nothing there; a device arena remembers its GPU and its table refuses
// programs on another; a table's memory is handed to GPU kernels only when
// the given hooks made it; Close frees memory without holding the table's
// mutex.
#include "core/memory.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <memory>
#include <stdexcept>
#include <vector>

#include "core/gpu/fake_pinned.h"
#include "core/gpu/mapped_array.h"
#include "core/table/table.h"
#include "core/table/table_gpu.h"

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

// Freeing pinned or GPU memory may wait for the GPU, whose stream may wait
// for the table's mutex (a staged priority update's host function): Close
// frees the memory after letting the mutex go. The release hook checks that
// another thread can take the mutex meanwhile.
std::shared_ptr<Table> closing;
std::atomic<int> releases_with_the_mutex_free{0}, releases_with_the_mutex_held{0};

void ReleaseCheckingTheMutex(void* p) {
  // A detached probe: if the mutex were held it would finish only after
  // Close, and the test fails instead of hanging.
  auto taken = std::make_shared<std::atomic<bool>>(false);
  std::thread([table = closing, taken] {
    table->closed();  // takes the mutex
    taken->store(true);
  }).detach();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (!taken->load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ++(taken->load() ? releases_with_the_mutex_free : releases_with_the_mutex_held);
  std::free(p);
}

TEST(CloseReleasesMemory, WithoutHoldingTheTablesMutex) {
  const MappedAllocator checking{fake_pinned::Allocate, ReleaseCheckingTheMutex};
  SetMappedAllocator(&checking);
  TableSpec spec;
  spec.columns.push_back({"x", 4, std::vector<uint8_t>(4, 0)});
  spec.capacity = 4;
  spec.max_length = 2;
  spec.gpu_mapped = true;
  closing = std::make_shared<Table>(spec);
  ASSERT_TRUE(closing->Close(1.0));
  EXPECT_GE(releases_with_the_mutex_free.load(), 2);  // the arena and the slot records at least
  EXPECT_EQ(releases_with_the_mutex_held.load(), 0);
  SetMappedAllocator(nullptr);
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
  TableGpu(table).CheckDevice(1);
  try {
    TableGpu(table).CheckDevice(0);
    ADD_FAILURE() << "a program on GPU 0 used GPU 1's table";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("GPU 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("runs on GPU 0"), std::string::npos) << e.what();
  }
  spec.on_device = false;
  Table host(spec);
  TableGpu(host).CheckDevice(0);  // host arenas serve every GPU
  TableGpu(host).CheckDevice(3);
  SetDeviceMemory(nullptr);
}

TableSpec SmallSpec(bool on_device) {
  TableSpec spec;
  spec.columns.push_back({"x", 4, std::vector<uint8_t>(4, 0)});
  spec.capacity = 2;
  spec.max_length = 2;
  spec.gpu_mapped = true;
  spec.on_device = on_device;
  return spec;
}

void ExpectUnreachable(Table& table, const MappedAllocator* mapped,
                       const DeviceMemory* device) {
  try {
    TableGpu(table).CheckReachable(mapped, device);
    ADD_FAILURE() << "a kernel was allowed to read memory the GPU cannot reach";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("not reachable from the GPU"), std::string::npos)
        << e.what();
  }
}

// A CUDA handler hands a table to its kernels only if this build's CUDA hooks
// made its memory: a test's emulated mapping (host memory claiming a device
// address) once reached a real kernel and faulted it (CUDA_ERROR_ILLEGAL_ADDRESS).
TEST(GpuReachable, OnlyMemoryMadeByTheGivenHooks) {
  const MappedAllocator other{fake_pinned::Allocate, fake_pinned::Release};
  SetMappedAllocator(&kFake);
  SetDeviceMemory(&kFakeDevice);
  {
    Table mapped(SmallSpec(false));
    TableGpu(mapped).CheckReachable(&kFake, &kFakeDevice);
    TableGpu(mapped).CheckReachable(&kFake, nullptr);  // a host table needs no GPU memory hooks
    ExpectUnreachable(mapped, &other, &kFakeDevice);  // mapped, but by other hooks
    ExpectUnreachable(mapped, nullptr, &kFakeDevice);
    Table device(SmallSpec(true));
    TableGpu(device).CheckReachable(&kFake, &kFakeDevice);
    ExpectUnreachable(device, &kFake, nullptr);
    SetMappedAllocator(&other);  // an emulation switched on after these were made
    TableGpu(mapped).CheckReachable(&kFake, &kFakeDevice);
  }
  SetMappedAllocator(nullptr);
  {
    Table plain(SmallSpec(false));  // no mapping: ordinary host memory
    ExpectUnreachable(plain, &kFake, &kFakeDevice);
    ExpectUnreachable(plain, nullptr, nullptr);
  }
  SetDeviceMemory(nullptr);
}

// Four fake GPUs: the calling thread's current one, and the switches made.
thread_local int fake_current = 0;
int fake_switches = 0;
const DeviceMemory kFourGpus{
    [](size_t) -> void* { return nullptr; }, [](void*) {},
    [](void*, const void*, size_t) {},       [](void*, const void*, size_t) {},
    []() -> size_t { return 0; },            []() { return fake_current; },
    [](int gpu) {
      if (gpu < 0 || gpu >= 4) return false;
      ++fake_switches;
      fake_current = gpu;
      return true;
    }};

TEST(DeviceScope, MakesTheGpuCurrentWhileItLivesAndOnlyWhenItIsNot) {
  fake_current = 1;
  fake_switches = 0;
  {
    const DeviceScope on(&kFourGpus, 3);
    EXPECT_EQ(fake_current, 3);
    {
      const DeviceScope again(&kFourGpus, 3);  // already current: nothing to do
      EXPECT_EQ(fake_switches, 1);
    }
    EXPECT_EQ(fake_current, 3);
  }
  EXPECT_EQ(fake_current, 1);
  EXPECT_EQ(fake_switches, 2);
  {
    const DeviceScope any(&kFourGpus, -1);  // the current one, whichever it is
    const DeviceScope none(nullptr, 2);     // no hooks: one GPU
  }
  EXPECT_EQ(fake_current, 1);
  EXPECT_EQ(fake_switches, 2);
  EXPECT_THROW(DeviceScope(&kFourGpus, 7), std::runtime_error);
  EXPECT_EQ(fake_current, 1);
}

}  // namespace
}  // namespace gearjax
