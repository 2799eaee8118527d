// The GPU priority-update kernel's phases (update_block.h), run by the
// emulator on plain host arrays, against SumTree::SetMany and the records a
// host update leaves; under the sanitizers, so the carved shared memory is
// checked for overruns too.
#include "core/gpu/update_block.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/selectors/priority_weight.h"
#include "core/selectors/sum_tree.h"

namespace gearjax {
namespace {

constexpr int64_t kCapacity = 300;  // three levels of eight, not a power of eight
constexpr int kSlotBits = 9;

struct Fixture {
  std::vector<SlotInfo> info = std::vector<SlotInfo>(kCapacity);
  SumTree tree_a{kCapacity, false}, tree_b{kCapacity, false};
  GpuUpdateReport report{};
  int32_t updated = -2;

  Fixture() {
    for (int64_t s = 0; s < kCapacity; ++s) {
      const double p = static_cast<double>((s * 7) % 5);  // some 0
      info[s] = {(int64_t{3} << kSlotBits) | s, 1, p, 0, s % 10 == 9 ? SlotState::kFree
                                                                     : SlotState::kLive};
      tree_a.Set(s, PriorityWeight(p, 1.0));
      tree_b.Set(s, PriorityWeight(p, 0.5));
    }
  }

  GpuUpdate View(const std::vector<int64_t>& keys, const std::vector<double>& priorities) {
    GpuUpdate u{};
    u.info = info.data();
    u.capacity = kCapacity;
    u.slot_mask = (int64_t{1} << kSlotBits) - 1;
    const SumTreeView view = tree_a.view();
    u.levels = view.levels;
    std::memcpy(u.offsets, view.offsets, sizeof(u.offsets));
    u.trees = 2;
    u.tree[0] = {const_cast<double*>(tree_a.view().nodes), nullptr, 1.0};
    u.tree[1] = {const_cast<double*>(tree_b.view().nodes), nullptr, 0.5};
    u.report = &report;
    u.keys = keys.data();
    u.key_format = KeyFormat::kInt64;
    u.priorities = priorities.data();
    u.priority_format = PriorityFormat::kFloat64;
    u.n = static_cast<int64_t>(keys.size());
    u.updated = &updated;
    return u;
  }
};

void RunKernel(const GpuUpdate& u, int64_t threads) {
  std::vector<long long> shared(GpuUpdateSharedBytes(u.n) / sizeof(long long) + 1);
  EmulateGpuUpdate(u, shared.data(), threads);
}

TEST(GpuUpdate, EqualsTheHostTreesAndRecordsWithLaterDuplicatesWinning) {
  for (int64_t threads : {1, 3, 64, 512}) {
    Fixture gpu, host;
    std::mt19937_64 rng(threads);
    std::vector<int64_t> keys;
    std::vector<double> priorities;
    for (int i = 0; i < 700; ++i) {  // many duplicates; stale, free and negative keys
      const int64_t slot = static_cast<int64_t>(rng() % kCapacity);
      const int64_t sequence = i % 11 == 0 ? 2 : 3;
      keys.push_back(i % 13 == 0 ? -1 : (sequence << kSlotBits) | slot);
      priorities.push_back(i % 6 == 0 ? 0.0 : static_cast<double>(rng() % 1000) / 7.0);
    }
    RunKernel(gpu.View(keys, priorities), threads);
    // The host's way: sequentially, then SetMany (a later duplicate wins).
    int64_t live = 0, skipped = 0, positive = 0;
    std::vector<int64_t> leaves;
    std::vector<double> a, b;
    for (size_t i = 0; i < keys.size(); ++i) {
      const int64_t slot = keys[i] & ((1 << kSlotBits) - 1);
      SlotInfo& info = host.info[slot];
      if (keys[i] < 0 || info.state != SlotState::kLive || info.key != keys[i]) {
        skipped += keys[i] >= 0;
        continue;
      }
      ++live;
      positive += (priorities[i] > 0) - (info.priority > 0);
      info.priority = priorities[i];
      leaves.push_back(slot);
      a.push_back(PriorityWeight(priorities[i], 1.0));
      b.push_back(PriorityWeight(priorities[i], 0.5));
    }
    host.tree_a.SetMany(leaves.data(), a.data(), static_cast<int64_t>(leaves.size()));
    host.tree_b.SetMany(leaves.data(), b.data(), static_cast<int64_t>(leaves.size()));

    EXPECT_EQ(gpu.updated, live) << threads;
    EXPECT_EQ(gpu.report.updated, static_cast<unsigned long long>(live));
    EXPECT_EQ(gpu.report.skipped, static_cast<unsigned long long>(skipped));
    EXPECT_EQ(static_cast<int64_t>(gpu.report.positive), positive);
    EXPECT_EQ(gpu.report.failed, 0u);
    for (int64_t s = 0; s < kCapacity; ++s) EXPECT_EQ(gpu.info[s].priority, host.info[s].priority);
    const size_t nodes = gpu.tree_a.node_count();
    for (const auto& [g, h] : {std::pair{&gpu.tree_a, &host.tree_a}, {&gpu.tree_b, &host.tree_b}}) {
      EXPECT_EQ(0, std::memcmp(g->view().nodes, h->view().nodes, nodes * sizeof(double)))
          << "threads " << threads;
    }
  }
}

// Slots published while an earlier kernel ran: their records set, their
// leaves still 0 (GpuUpdateLedger's deferred leaves, gpu_updates.h). The
// kernel sets them from the records before its own entries (one of which names a deferred slot and
// wins), good update or refused, and sums their parents with its own.
TEST(GpuUpdate, DeferredLeavesAreSetFromTheRecordsBeforeTheUpdatesOwnEntries) {
  for (const bool refused : {false, true}) {
    for (int64_t threads : {1, 5, 64}) {
      Fixture gpu, host;
      const std::vector<int64_t> deferred = {9, 19, 150, 151, 299};  // free slots, published
      for (Fixture* f : {&gpu, &host}) {
        for (int64_t slot : deferred) {
          f->info[slot] = {(int64_t{4} << kSlotBits) | slot, 2, 1.5 + static_cast<double>(slot),
                           0, SlotState::kLive};
        }
      }
      // The host's way: the deferred leaves (from the records), then the update.
      for (int64_t slot : deferred) {
        host.tree_a.Set(slot, PriorityWeight(host.info[slot].priority, 1.0));
        host.tree_b.Set(slot, PriorityWeight(host.info[slot].priority, 0.5));
      }
      const std::vector<int64_t> keys = {(int64_t{3} << kSlotBits) | 1,
                                         (int64_t{4} << kSlotBits) | 150};
      const std::vector<double> priorities = {7.0, refused ? NAN : 0.25};
      if (!refused) {
        for (size_t i = 0; i < keys.size(); ++i) {
          const int64_t slot = keys[i] & ((1 << kSlotBits) - 1);
          host.info[slot].priority = priorities[i];
          host.tree_a.Set(slot, PriorityWeight(priorities[i], 1.0));
          host.tree_b.Set(slot, PriorityWeight(priorities[i], 0.5));
        }
      }
      GpuUpdate u = gpu.View(keys, priorities);
      u.deferred = deferred.data();
      u.deferred_n = static_cast<int64_t>(deferred.size());
      RunKernel(u, threads);
      EXPECT_EQ(gpu.updated, refused ? -1 : 2) << threads;
      for (int64_t s = 0; s < kCapacity; ++s) EXPECT_EQ(gpu.info[s].priority, host.info[s].priority);
      const size_t nodes = gpu.tree_a.node_count();
      for (const auto& [g, h] :
           {std::pair{&gpu.tree_a, &host.tree_a}, {&gpu.tree_b, &host.tree_b}}) {
        EXPECT_EQ(0, std::memcmp(g->view().nodes, h->view().nodes, nodes * sizeof(double)))
            << "refused " << refused << ", threads " << threads;
      }
    }
  }
}

TEST(GpuUpdate, ABadPriorityChangesNothingAndReportsTheFirstBadEntry) {
  Fixture f;
  const std::vector<double> before(f.tree_a.view().nodes,
                                   f.tree_a.view().nodes + f.tree_a.node_count());
  std::vector<int64_t> keys;
  for (int64_t s = 0; s < 8; ++s) keys.push_back((int64_t{3} << kSlotBits) | s);
  std::vector<double> priorities(8, 2.0);
  priorities[6] = NAN;
  priorities[4] = -1.0;
  priorities[7] = 1e-320;  // subnormal
  RunKernel(f.View(keys, priorities), 3);
  EXPECT_EQ(f.updated, -1);
  EXPECT_EQ(f.report.failed, 1u);
  EXPECT_EQ(f.report.bad_entry, 4);
  EXPECT_EQ(f.report.bad_value, -1.0);
  EXPECT_EQ(f.report.updated, 0u);
  EXPECT_EQ(f.report.skipped, 0u);
  EXPECT_EQ(0, std::memcmp(before.data(), f.tree_a.view().nodes, before.size() * sizeof(double)));
  EXPECT_EQ(f.info[0].priority, 0.0);
}

TEST(GpuUpdate, TheFirstRefusalKeepsItsDetailsUntilTheHostLetsThemGo) {
  Fixture f;
  const std::vector<int64_t> keys = {(int64_t{3} << kSlotBits) | 1, (int64_t{3} << kSlotBits) | 2};
  RunKernel(f.View(keys, {NAN, 1.0}), 2);
  RunKernel(f.View(keys, {1.0, -5.0}), 2);
  EXPECT_EQ(f.report.failed, 2u);
  EXPECT_EQ(f.report.held, 1u);
  EXPECT_EQ(f.report.bad_entry, 0);
  EXPECT_TRUE(std::isnan(f.report.bad_value));
  f.report.held = 0;  // the host has read them
  RunKernel(f.View(keys, {1.0, -5.0}), 2);
  EXPECT_EQ(f.report.bad_entry, 1);
  EXPECT_EQ(f.report.bad_value, -5.0);
}

TEST(GpuUpdate, TheSharedMemoryFitsTheLargestUpdateAndTheHashHasRoom) {
  EXPECT_LE(GpuUpdateSharedBytes(kMaxGpuUpdateKeys), size_t{227} * 1024);  // sm_90's limit
  for (int64_t n : {0, 1, 8, 9, 4095, 4096}) EXPECT_GE(GpuUpdateHashSize(n), 2 * n);
  // Every slot of a full hash table is still found (linear probing wraps).
  std::vector<long long> memory(GpuUpdateSharedBytes(8) / sizeof(long long) + 1);
  const GpuUpdateShared s = CarveGpuUpdateShared(memory.data(), 8);
  for (int64_t h = 0; h < s.hash_size; ++h) s.hash_slot[h] = -1;
  for (int32_t slot = 0; slot < s.hash_size; ++slot) GpuUpdateHashPlace(s, slot * 1024, true);
  for (int32_t slot = 0; slot < s.hash_size; ++slot) {
    const int64_t place = GpuUpdateHashPlace(s, slot * 1024, false);
    ASSERT_GE(place, 0);
    EXPECT_EQ(s.hash_slot[place], slot * 1024);
  }
}

TEST(GpuUpdate, Float32PrioritiesAndInt32KeysDecodeAsTheHostDoes) {
  Fixture f;
  const std::vector<int32_t> keys = {static_cast<int32_t>((3 << kSlotBits) | 1)};
  uint32_t subnormal = 1;  // the smallest float32 subnormal: a positive float64
  GpuUpdate u = f.View({}, {});
  u.keys = keys.data();
  u.key_format = KeyFormat::kInt32;
  u.priorities = &subnormal;
  u.priority_format = PriorityFormat::kFloat32;
  u.n = 1;
  RunKernel(u, 4);
  EXPECT_EQ(f.updated, 1);
  EXPECT_EQ(f.info[1].priority, std::ldexp(1.0, -149));
}

// Turing (sm_75) lets a block opt in to 64 KiB of shared memory: updates of
// 2,049-4,096 keys need more and must be staged, not launched (the launch
// failed with cudaErrorInvalidValue); Hopper's 227 KiB take them all.
TEST(GpuUpdateFits, WithinTheGpusSharedMemoryAndTheKernelsKeys) {
  constexpr size_t kTuring = 64 * 1024, kHopper = 227 * 1024;
  EXPECT_EQ(GpuUpdateSharedBytes(2048), 41024u);
  EXPECT_EQ(GpuUpdateSharedBytes(2049), 73796u);
  EXPECT_EQ(GpuUpdateSharedBytes(kMaxGpuUpdateKeys), 81984u);
  EXPECT_TRUE(GpuUpdateFits(0, kTuring));
  EXPECT_TRUE(GpuUpdateFits(2048, kTuring));
  EXPECT_FALSE(GpuUpdateFits(2049, kTuring));
  EXPECT_FALSE(GpuUpdateFits(kMaxGpuUpdateKeys, kTuring));
  EXPECT_TRUE(GpuUpdateFits(kMaxGpuUpdateKeys, kHopper));
  EXPECT_TRUE(GpuUpdateFits(kMaxGpuUpdateKeys, GpuUpdateSharedBytes(kMaxGpuUpdateKeys)));
  EXPECT_FALSE(GpuUpdateFits(kMaxGpuUpdateKeys, GpuUpdateSharedBytes(kMaxGpuUpdateKeys) - 1));
  EXPECT_FALSE(GpuUpdateFits(kMaxGpuUpdateKeys + 1, kAnyGpuSharedMemory));
  EXPECT_FALSE(GpuUpdateFits(-1, kAnyGpuSharedMemory));
}

}  // namespace
}  // namespace gearjax
