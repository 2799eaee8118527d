// Tests of a table's GPU staging (gpu_staging.h) with fake pinned memory and
// a fake GPU memory (host memory): a list is nobody else's while its ticket
// is in flight, reused once it ended, and replaced by a larger one (the old
// one retired for the caller to free) when too small; no GPU-mapped memory
// gives no list; a mirror copy lists exactly the logged nodes and brings the
// mirror equal to the host tree; and a copy on one stream is another
// stream's to wait for only while its ticket is in flight.
#include "core/gpu/gpu_staging.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/gpu/fake_pinned.h"
#include "core/gpu/tree_mirror.h"

namespace gearjax {
namespace {

const DeviceMemory kFakeGpu{
    [](size_t bytes) -> void* { return std::malloc(bytes); },
    [](void* p) { std::free(p); },
    [](void* dst, const void* src, size_t n) { std::memcpy(dst, src, n); },
    [](void* dst, const void* src, size_t n) { std::memcpy(dst, src, n); },
    []() { return size_t{1} << 30; }};

class GpuStagingTest : public ::testing::Test {
 protected:
  void SetUp() override { SetMappedAllocator(&fake_pinned::kAllocator); }
  void TearDown() override { SetMappedAllocator(nullptr); }

  SampleTickets tickets_;
  GpuStaging::Retired retired_;
};

TEST_F(GpuStagingTest, AListIsNobodyElsesUntilItsTicketEnds) {
  GpuStaging staging(&fake_pinned::kAllocator, nullptr);
  const uint64_t first = tickets_.Take();
  MappedArray<int64_t>* a = staging.ListFor(100, first, tickets_, &retired_);
  ASSERT_NE(a, nullptr);
  EXPECT_NE(a->device_data(), nullptr);
  EXPECT_GE(a->size(), 100u);
  // In flight: a second call gets another list.
  const uint64_t second = tickets_.Take();
  MappedArray<int64_t>* b = staging.ListFor(100, second, tickets_, &retired_);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(b, a);
  // Ended: the first list serves again, for a size it holds.
  tickets_.Return(first);
  const uint64_t third = tickets_.Take();
  EXPECT_EQ(staging.ListFor(static_cast<int64_t>(a->size()), third, tickets_, &retired_), a);
  EXPECT_TRUE(retired_.empty());
}

TEST_F(GpuStagingTest, AnEndedListTooSmallIsReplacedAndRetired) {
  GpuStaging staging(&fake_pinned::kAllocator, nullptr);
  const uint64_t first = tickets_.Take();
  MappedArray<int64_t>* small = staging.ListFor(10, first, tickets_, &retired_);
  ASSERT_NE(small, nullptr);
  const size_t small_size = small->size();
  tickets_.Return(first);
  const uint64_t second = tickets_.Take();
  MappedArray<int64_t>* large =
      staging.ListFor(static_cast<int64_t>(small_size) + 1, second, tickets_, &retired_);
  ASSERT_NE(large, nullptr);
  EXPECT_GE(large->size(), 2 * (small_size + 1));  // twice the size asked: a log grows
  ASSERT_EQ(retired_.size(), 1u);  // the caller frees it, after its lock
  std::vector<std::shared_ptr<void>> taken;
  staging.TakeLists(&taken);
  EXPECT_EQ(taken.size(), 1u);  // the large one; the small one was retired
}

TEST_F(GpuStagingTest, NoMappedMemoryGivesNoList) {
  GpuStaging staging(nullptr, nullptr);
  EXPECT_EQ(staging.ListFor(10, tickets_.Take(), tickets_, &retired_), nullptr);
}

TEST_F(GpuStagingTest, MirrorCopiesListTheLoggedNodesAndOrderStreams) {
  GpuStaging staging(&fake_pinned::kAllocator, &kFakeGpu);
  SumTree tree(64, /*gpu_mapped=*/true);
  for (int64_t leaf = 0; leaf < 64; ++leaf) tree.Set(leaf, 1.0 + static_cast<double>(leaf));
  const SumTree* trees[1] = {&tree};
  int stream_a = 0, stream_b = 0;

  // First copy: the whole tree (no list needed), then the mirror equals it.
  const uint64_t first = tickets_.Take();
  MirrorCopies copies;
  double* mirror = nullptr;
  staging.CopyMirrors(trees, 1, first, &stream_a, tickets_, &copies, &mirror, &retired_);
  ASSERT_EQ(copies.n, 1);
  ASSERT_NE(mirror, nullptr);
  EXPECT_EQ(copies.copy[0].nodes, nullptr);
  EmulateMirrorCopies(copies);
  EXPECT_EQ(std::memcmp(mirror, tree.view().nodes, tree.node_count() * sizeof(double)), 0);
  EXPECT_EQ(staging.last_copy(), first);
  // In flight: another stream's to wait for, not its own stream's.
  EXPECT_TRUE(staging.OtherStreamCopyInFlight(&stream_b, tickets_));
  EXPECT_FALSE(staging.OtherStreamCopyInFlight(&stream_a, tickets_));
  tickets_.Return(first);
  EXPECT_FALSE(staging.OtherStreamCopyInFlight(&stream_b, tickets_));

  // One leaf written: the next copy lists its path only, in a staging list.
  tree.Set(5, 100.0);
  const uint64_t second = tickets_.Take();
  MirrorCopies more;
  staging.CopyMirrors(trees, 1, second, &stream_b, tickets_, &more, &mirror, &retired_);
  ASSERT_EQ(more.n, 1);
  ASSERT_NE(more.copy[0].nodes, nullptr);
  EXPECT_GT(more.copy[0].count, 0);
  EXPECT_LT(more.copy[0].count, static_cast<int64_t>(tree.node_count()));
  EmulateMirrorCopies(more);
  EXPECT_EQ(std::memcmp(mirror, tree.view().nodes, tree.node_count() * sizeof(double)), 0);
  // Copies from two streams: any copy in flight is another's, even to its own.
  EXPECT_TRUE(staging.OtherStreamCopyInFlight(&stream_b, tickets_));
  tickets_.Return(second);
  EXPECT_FALSE(staging.OtherStreamCopyInFlight(&stream_b, tickets_));
}

// Two calls on one stream may enqueue their copies out of ticket order: the
// later one's may end while the earlier one's has yet to run, which another
// stream must still wait for.
TEST_F(GpuStagingTest, AnEarlierCopyStillToRunIsInFlightWhenALaterOneEnded) {
  GpuStaging staging(&fake_pinned::kAllocator, &kFakeGpu);
  SumTree tree(64, /*gpu_mapped=*/true);
  for (int64_t leaf = 0; leaf < 64; ++leaf) tree.Set(leaf, 1.0);
  const SumTree* trees[1] = {&tree};
  int stream = 0, other = 0;
  double* mirror = nullptr;
  const uint64_t first = tickets_.Take(), second = tickets_.Take();
  MirrorCopies copies, more;
  staging.CopyMirrors(trees, 1, first, &stream, tickets_, &copies, &mirror, &retired_);
  tree.Set(5, 2.0);
  staging.CopyMirrors(trees, 1, second, &stream, tickets_, &more, &mirror, &retired_);
  ASSERT_EQ(copies.n, 1);
  ASSERT_EQ(more.n, 1);
  tickets_.Return(second);  // its copy ran first
  EXPECT_TRUE(staging.OtherStreamCopyInFlight(&other, tickets_));
  EXPECT_FALSE(staging.OtherStreamCopyInFlight(&stream, tickets_));
  tickets_.Return(first);
  EXPECT_FALSE(staging.OtherStreamCopyInFlight(&other, tickets_));
}

}  // namespace
}  // namespace gearjax
