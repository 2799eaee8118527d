// Tests of sum trees' GPU-memory mirrors (tree_mirror.h) with a fake GPU
// memory (host memory) and the copy's CPU emulation (mirror_block.h): the
// first copy is the whole tree, each later one exactly the nodes the host
// wrote, once each; a log past its limit turns into a whole copy; after
// each copy the mirror equals the host tree bit for bit, whatever mix of
// Set and SetMany ran; a failed allocation leaves no mirror and is not
// retried; the memory goes back through the hooks.
#include "core/gpu/tree_mirror.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "core/gpu/fake_pinned.h"
#include "core/selectors/sum_tree.h"

namespace gearjax {
namespace {

int allocations = 0, releases = 0;
bool refuse = false;

const DeviceMemory kFakeGpu{
    [](size_t bytes) -> void* {
      if (refuse) return nullptr;
      ++allocations;
      return std::malloc(bytes);
    },
    [](void* p) {
      ++releases;
      std::free(p);
    },
    [](void* dst, const void* src, size_t n) { std::memcpy(dst, src, n); },
    [](void* dst, const void* src, size_t n) { std::memcpy(dst, src, n); },
    []() { return size_t{1} << 30; }};

class TreeMirrorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetMappedAllocator(&fake_pinned::kAllocator);
    allocations = releases = 0;
    refuse = false;
  }
  void TearDown() override { SetMappedAllocator(nullptr); }

  // Runs the copy a Take describes, with the list in a vector standing in
  // for the pinned staging memory.
  static void Copy(TreeMirror& mirror, const SumTree& tree) {
    std::vector<int64_t> list(static_cast<size_t>(std::max<int64_t>(mirror.logged(), 1)));
    MirrorCopies copies;
    copies.copy[copies.n++] = mirror.Take(tree.device_view().nodes, list.data(), list.data());
    EmulateMirrorCopies(copies);
  }

  static bool Equal(const TreeMirror& mirror, const SumTree& tree) {
    return std::memcmp(mirror.device(), tree.view().nodes, tree.node_count() * sizeof(double)) ==
           0;
  }
};

TEST_F(TreeMirrorTest, FirstCopyIsTheWholeTreeThenOnlyWhatTheHostWrote) {
  SumTree tree(100, /*gpu_mapped=*/true);
  tree.Set(3, 2.0);
  TreeMirror* mirror = tree.Mirror(&kFakeGpu);
  ASSERT_NE(mirror, nullptr);
  EXPECT_EQ(tree.Mirror(&kFakeGpu), mirror);  // made once
  EXPECT_EQ(mirror->logged(), -1);
  MirrorCopies copies;
  copies.copy[copies.n++] = mirror->Take(tree.device_view().nodes, nullptr, nullptr);
  EXPECT_EQ(copies.copy[0].nodes, nullptr);
  EXPECT_EQ(copies.copy[0].count, static_cast<int64_t>(tree.node_count()));
  EmulateMirrorCopies(copies);
  EXPECT_TRUE(Equal(*mirror, tree));
  EXPECT_EQ(mirror->logged(), 0);

  // 100 leaves: levels of 104, 16, 8 and 8 nodes (offsets 0, 104, 120, 128).
  tree.Set(10, 1.5);
  tree.Set(11, 0.5);  // same parent, same root: logged once each
  std::vector<int64_t> list(static_cast<size_t>(mirror->logged()));
  const MirrorCopy copy = mirror->Take(tree.device_view().nodes, list.data(), list.data());
  EXPECT_EQ(std::set<int64_t>(list.begin(), list.end()),
            (std::set<int64_t>{10, 11, 104 + 1, 120 + 0, 128 + 0}));
  EXPECT_EQ(copy.count, 5);
  MirrorCopies again;
  again.copy[again.n++] = copy;
  EmulateMirrorCopies(again);
  EXPECT_TRUE(Equal(*mirror, tree));
}

TEST_F(TreeMirrorTest, MirrorEqualsTheHostTreeAfterEveryCopy) {
  std::mt19937_64 random(7);
  for (int64_t leaves : {1, 9, 64, 1000, 40000}) {
    SumTree tree(leaves, true);
    TreeMirror* mirror = tree.Mirror(&kFakeGpu);
    ASSERT_NE(mirror, nullptr);
    for (int round = 0; round < 20; ++round) {
      const int64_t n = 1 + static_cast<int64_t>(random() % 64);
      std::vector<int64_t> slots;
      std::vector<double> weights;
      for (int64_t i = 0; i < n; ++i) {
        slots.push_back(static_cast<int64_t>(random() % leaves));
        weights.push_back(static_cast<double>(random() % 1000) / 7.0);
      }
      if (round % 2 == 0) {
        tree.SetMany(slots.data(), weights.data(), n);
      } else {
        for (int64_t i = 0; i < n; ++i) tree.Set(slots[i], weights[i]);
      }
      if (round % 3 == 2) continue;  // sometimes two rounds in one copy
      Copy(*mirror, tree);
      EXPECT_TRUE(Equal(*mirror, tree)) << leaves << " " << round;
    }
  }
}

TEST_F(TreeMirrorTest, ALogPastItsLimitCopiesEverything) {
  SumTree tree(4096, true);
  TreeMirror* mirror = tree.Mirror(&kFakeGpu);
  Copy(*mirror, tree);
  const int64_t limit = static_cast<int64_t>(mirror->limit());
  for (int64_t leaf = 0; leaf < 4096 && mirror->logged() >= 0; ++leaf) tree.Set(leaf, 1.0);
  EXPECT_EQ(mirror->logged(), -1);
  EXPECT_LT(limit, 4096 * 2);
  tree.Set(5, 3.0);  // still everything
  EXPECT_EQ(mirror->logged(), -1);
  Copy(*mirror, tree);
  EXPECT_TRUE(Equal(*mirror, tree));
  tree.Set(7, 2.0);  // and a short list again after
  EXPECT_GT(mirror->logged(), 0);
  EXPECT_LE(mirror->logged(), 5);
}

TEST_F(TreeMirrorTest, NoMirrorWithoutGpuMemoryOrMapping) {
  SumTree unmapped(10, /*gpu_mapped=*/false);
  SetMappedAllocator(nullptr);
  SumTree plain(10, true);  // asked for mapping, none available
  EXPECT_EQ(plain.Mirror(&kFakeGpu), nullptr);
  EXPECT_EQ(unmapped.Mirror(&kFakeGpu), nullptr);
  SetMappedAllocator(&fake_pinned::kAllocator);
  SumTree mapped(10, true);
  EXPECT_EQ(mapped.Mirror(nullptr), nullptr);
  refuse = true;
  EXPECT_EQ(mapped.Mirror(&kFakeGpu), nullptr);
  refuse = false;
  EXPECT_EQ(mapped.Mirror(&kFakeGpu), nullptr);  // refused once: not asked again
  EXPECT_EQ(allocations, 0);
  mapped.Set(1, 1.0);  // writes without a mirror log nothing (and do not crash)
  EXPECT_EQ(mapped.mirror(), nullptr);
}

TEST_F(TreeMirrorTest, MemoryGoesBackThroughTheHooks) {
  {
    SumTree tree(50, true);
    ASSERT_NE(tree.Mirror(&kFakeGpu), nullptr);
    EXPECT_EQ(allocations, 1);
    EXPECT_EQ(releases, 0);
  }
  EXPECT_EQ(releases, 1);
}

}  // namespace
}  // namespace gearjax
