// Tests of the GPU completion ring on the CPU: the kernel's block code
// (CompleteBlock) run by many threads reports a ticket exactly once, after
// every block, and leaves its place's count at 0; the ring's counts go to GPU
// memory through the device hooks when given (zeroed there), and a real GPU's
// ring must be mapped. (Tickets handed to the ring: sample_tickets_test.cc.)
#include "core/gpu/gpu_completions.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>


namespace gearjax {
namespace {

TEST(CompleteBlock, TheLastOfManyBlocksReportsOnceAndResetsTheCount) {
  GpuCompletions ring(GetMappedAllocator());
  for (uint64_t ticket : {1ull, 2ull, 4097ull}) {  // 4097 reuses ticket 1's place
    const CompletionView view = ring.View(ticket, GpuCompletions::kEmulated);
    constexpr int kBlocks = 64;
    std::vector<std::thread> blocks;
    for (int b = 0; b < kBlocks; ++b) {
      blocks.emplace_back([&] { CompleteBlock(view, kBlocks); });
    }
    for (std::thread& t : blocks) t.join();
    EXPECT_TRUE(ring.Done(ticket));
    EXPECT_EQ(view.done[ticket % GpuCompletions::kSize], ticket);
    EXPECT_EQ(view.blocks[ticket % GpuCompletions::kSize], 0u);
  }
  EXPECT_FALSE(ring.Done(1));  // its place now holds 4097
}

TEST(CompleteBlock, NothingIsReportedBeforeTheLastBlock) {
  GpuCompletions ring(GetMappedAllocator());
  const CompletionView view = ring.View(7, GpuCompletions::kEmulated);
  CompleteBlock(view, 3);
  CompleteBlock(view, 3);
  EXPECT_FALSE(ring.Done(7));
  EXPECT_EQ(view.blocks[7], 2u);
  CompleteBlock(view, 3);
  EXPECT_TRUE(ring.Done(7));
  CompleteBlock(CompletionView{}, 1);  // no ring: nothing to report, nothing touched
}

// GPU memory as host memory, counting what the ring asks of it.
int allocations = 0, copies = 0, releases = 0;
const DeviceMemory kCountingDevice{
    [](size_t bytes) -> void* {
      ++allocations;
      void* p = std::malloc(bytes);
      std::memset(p, 0xab, bytes);  // not zero: the ring must zero it
      return p;
    },
    [](void* p) {
      ++releases;
      std::free(p);
    },
    [](void* dst, const void* src, size_t n) {
      ++copies;
      std::memcpy(dst, src, n);
    },
    [](void* dst, const void* src, size_t n) { std::memcpy(dst, src, n); },
    []() -> size_t { return 0; }};

TEST(GpuCompletions, EachGpuCountsInItsOwnMemoryAndARealGpusRingMustBeMapped) {
  // Without a mapping allocator a real GPU could not write the ring: refused,
  // and nothing is taken from the GPU.
  allocations = copies = releases = 0;
  {
    GpuCompletions unmapped(/*mapped=*/nullptr);
    EXPECT_THROW(unmapped.AddDevice(0, &kCountingDevice), std::runtime_error);
    EXPECT_EQ(allocations, 0);
  }

  MappedAllocator host_as_mapped{[](size_t bytes, void** device) -> void* {
                                   void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
                                   *device = p;
                                   return p;
                                 },
                                 [](void* p) { std::free(p); }};
  SetMappedAllocator(&host_as_mapped);
  allocations = copies = releases = 0;
  {
    GpuCompletions ring(&host_as_mapped);
    EXPECT_FALSE(ring.HasDevice(0));
    EXPECT_THROW(ring.View(5, 0), InvalidArgument);  // no counts on GPU 0 yet
    ring.AddDevice(0, &kCountingDevice);
    ring.AddDevice(0, &kCountingDevice);  // once per GPU
    ring.AddDevice(3, &kCountingDevice);
    EXPECT_EQ(allocations, 2);
    EXPECT_EQ(copies, 2);  // each zeroed through the copy hook
    EXPECT_THROW(ring.AddDevice(64, &kCountingDevice), InvalidArgument);
    EXPECT_THROW(ring.AddDevice(1, nullptr), InvalidArgument);
    const CompletionView on0 = ring.View(5, 0), on3 = ring.View(5, 3);
    EXPECT_NE(on0.blocks, on3.blocks);
    EXPECT_EQ(on0.done, on3.done);  // one ring, mapped at one address for every GPU
    EXPECT_EQ(on0.size, GpuCompletions::kSize);
    for (uint64_t i = 0; i < GpuCompletions::kSize; ++i) ASSERT_EQ(on3.blocks[i], 0u);
    CompleteBlock(on3, 1);
    EXPECT_TRUE(ring.Done(5));
  }
  EXPECT_EQ(releases, 2);
  SetMappedAllocator(nullptr);
}

}  // namespace
}  // namespace gearjax
