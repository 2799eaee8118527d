// Tests of a table's GPU priority updates as the CUDA handler begins them
// (TableGpu::BeginUpdate), on the CPU: fake pinned memory mapped at its own
// address, fake GPU memory for the trees' mirrors, the completion ring
// emulated and the kernel's phases run by the emulator (update_block.h).
//  * Leaves deferred while an update ran and handed to the next kernel are
//    set whether or not that kernel gets enqueued: by it, or, where its copies
//    or launch failed (TableGpu::UpdateNotEnqueued) or BeginUpdate gave up
//    waiting for another stream's mirror copy, by the host once no update
//    may run. Lost, their items stayed undrawable until updated again.
//  * An update whose shared memory exceeds what the GPU lets a block use
//    (Turing: 64 KiB) is staged, taking no ticket.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "core/gpu/fake_pinned.h"
#include "core/gpu/gpu_completions.h"
#include "core/gpu/update_block.h"
#include "core/memory.h"
#include "core/table/table.h"
#include "core/table/table_gpu.h"

namespace gearjax {
namespace {

// GPU memory that is host memory (the mirrors' copies run on the CPU).
const DeviceMemory kFakeGpu{
    [](size_t bytes) -> void* { return std::calloc(1, bytes); },
    [](void* p) { std::free(p); },
    [](void* dst, const void* src, size_t n) { std::memcpy(dst, src, n); },
    [](void* dst, const void* src, size_t n) { std::memcpy(dst, src, n); },
    []() { return size_t{1} << 30; }};

const int kStreamA = 0, kStreamB = 0;  // two streams' identities (their addresses)

TableSpec Spec(bool on_device, double wait_seconds = 0.05) {
  TableSpec spec;
  spec.name = "gpu updates";
  spec.columns.push_back({"x", 4, std::vector<uint8_t>(4, 0)});
  spec.capacity = 8;
  spec.max_length = 2;
  spec.gpu_mapped = true;
  spec.on_device = on_device;
  spec.slot_wait_seconds = wait_seconds;  // by default a wait that gives up, soon
  return spec;
}

SampleRequest Request(Strategy strategy) {
  SampleRequest r;
  r.strategy = strategy;
  r.alpha = 1.0;
  r.batch = 4;
  r.window = 1;
  r.cut = Cut::kStart;
  r.replace = true;
  return r;
}

void Put(Table& table, double priority) {
  const int32_t steps[2] = {0, 0};
  table.Insert({steps}, 2, priority);
}

// The Prioritized(1.0) tree's total: the priorities its leaves hold.
double DrawableWeight(Table& table) { return table.Totals(Request(Strategy::kPrioritized)).weight; }

class TableGpuUpdatesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetMappedAllocator(&fake_pinned::kAllocator);
    SetDeviceMemory(&kFakeGpu);
  }
  void TearDown() override {
    SetDeviceMemory(nullptr);
    SetMappedAllocator(nullptr);
  }

  // A table of two items (priority 1 each) with a Prioritized(1.0) tree,
  // whose tickets report through the emulated ring.
  static std::unique_ptr<Table> Make(bool on_device = false, double wait_seconds = 0.05) {
    auto table = std::make_unique<Table>(Spec(on_device, wait_seconds));
    Put(*table, 1.0);
    Put(*table, 1.0);
    EXPECT_EQ(DrawableWeight(*table), 2.0);  // makes the tree
    TableGpu(*table).UseCompletions(nullptr, GpuCompletions::kEmulated);
    return table;
  }

  // An update of no keys begun on `stream` (the leaves it is handed in
  // *update) and, unless not, enqueued (as the handler tells the table once
  // it has launched the kernel); the test fails where the table staged it.
  static uint64_t Begin(Table& table, const int* stream, GpuUpdate* update,
                        bool enqueued = true) {
    MirrorCopies copies;
    const uint64_t ticket = TableGpu(table).BeginUpdate(stream, 0, update, &copies);
    EXPECT_NE(ticket, 0u) << "staged";
    if (enqueued && ticket != 0) TableGpu(table).UpdateEnqueued(ticket);
    return ticket;
  }
};

TEST_F(TableGpuUpdatesTest, LeavesHandedToAKernelNeverEnqueuedAreSetByTheHost) {
  std::unique_ptr<Table> table = Make();
  GpuUpdate first, second;
  const uint64_t t1 = Begin(*table, &kStreamA, &first);
  Put(*table, 5.0);  // while t1 may run: its leaf is deferred
  const uint64_t t2 = Begin(*table, &kStreamA, &second, /*enqueued=*/false);
  ASSERT_EQ(second.deferred_n, 1);  // handed to t2's kernel
  // The handler's copies or launch failed (UpdateTicket): t2's kernel never
  // runs. Its leaves go back, then its ticket ends, then t1's.
  TableGpu(*table).UpdateNotEnqueued(t2);
  table->EndSample(t2);
  table->EndSample(t1);
  EXPECT_EQ(DrawableWeight(*table), 7.0);  // the item inserted meanwhile can be drawn
}

TEST_F(TableGpuUpdatesTest, LeavesHandedToAKernelThatRunsAreSetByIt) {
  std::unique_ptr<Table> table = Make();
  GpuUpdate first, second;
  const uint64_t t1 = Begin(*table, &kStreamA, &first);
  Put(*table, 5.0);
  const uint64_t t2 = Begin(*table, &kStreamA, &second);
  ASSERT_EQ(second.deferred_n, 1);
  table->EndSample(t1);
  int32_t updated = -2;
  second.completion = TableGpu(*table).CompletionFor(t2, GpuCompletions::kEmulated);
  second.updated = &updated;
  TableGpu(*table).HandToDevice(t2);
  std::vector<long long> shared(GpuUpdateSharedBytes(0) / sizeof(long long) + 1);
  EmulateGpuUpdate(second, shared.data(), 4);
  EXPECT_EQ(updated, 0);
  EXPECT_EQ(DrawableWeight(*table), 7.0);
}

TEST_F(TableGpuUpdatesTest, AnUpdateThatGivesUpWaitingForAMirrorCopyKeepsTheDeferredLeaves) {
  std::unique_ptr<Table> table = Make(/*on_device=*/true);
  EXPECT_EQ(table->Totals(Request(Strategy::kTimestep)).weight, 4.0);  // makes its tree
  // A Timestep sample copies into the mirrors on stream A, then updates on
  // stream B: copies from two streams, so any copy in flight is another
  // stream's to the next update (GpuStaging::OtherStreamCopyInFlight).
  GpuSelection selection;
  MirrorCopies copies;
  const uint64_t sample =
      TableGpu(*table).BeginSample(Request(Strategy::kTimestep), &selection, &copies, &kStreamA);
  ASSERT_GT(copies.n, 0);
  table->EndSample(sample);
  GpuUpdate first, second;
  const uint64_t t1 = Begin(*table, &kStreamB, &first);  // its mirror copy in flight
  Put(*table, 5.0);                                       // deferred
  MirrorCopies more;
  EXPECT_THROW(TableGpu(*table).BeginUpdate(&kStreamB, 0, &second, &more), Timeout);
  table->EndSample(t1);
  EXPECT_EQ(DrawableWeight(*table), 7.0);
}

// Kernels are launched after the table's lock is let go: an update begun on
// another thread waits until the one begun before it is enqueued (or given
// up), so one stream's updates reach it in the order they read the trees.
TEST_F(TableGpuUpdatesTest, AnUpdateWaitsUntilTheOneBegunBeforeItIsEnqueued) {
  for (const bool enqueued : {true, false}) {
    std::unique_ptr<Table> table = Make(/*on_device=*/false, /*wait_seconds=*/60);
    GpuUpdate first, second;
    const uint64_t t1 = Begin(*table, &kStreamA, &first, /*enqueued=*/false);
    std::atomic<uint64_t> t2{0};
    std::thread other([&] {
      try {
        t2 = Begin(*table, &kStreamA, &second);
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
      }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(t2.load(), 0u) << "began before the first was enqueued";
    if (enqueued) {
      TableGpu(*table).UpdateEnqueued(t1);
    } else {
      TableGpu(*table).UpdateNotEnqueued(t1);
      table->EndSample(t1);
    }
    other.join();
    EXPECT_GT(t2.load(), t1);
    if (enqueued) table->EndSample(t1);
    table->EndSample(t2);
    EXPECT_EQ(DrawableWeight(*table), 2.0);
  }
}

TEST_F(TableGpuUpdatesTest, AnUpdateNeedingMoreSharedMemoryThanTheGpuAllowsIsStaged) {
  std::unique_ptr<Table> table = Make();
  constexpr size_t kTuring = 64 * 1024;  // cudaDevAttrMaxSharedMemoryPerBlockOptin on sm_75
  GpuUpdate update;
  MirrorCopies copies;
  TableGpu gpu(*table);
  for (const int64_t n : {int64_t{2049}, kMaxGpuUpdateKeys}) {
    EXPECT_EQ(gpu.BeginUpdate(&kStreamA, n, &update, &copies, kTuring), 0u) << n;
  }
  const uint64_t fits = gpu.BeginUpdate(&kStreamA, 2048, &update, &copies, kTuring);
  ASSERT_NE(fits, 0u);
  gpu.UpdateEnqueued(fits);
  table->EndSample(fits);
  // Staged updates took no ticket: the next is the one after `fits`.
  const uint64_t largest = gpu.BeginUpdate(&kStreamA, kMaxGpuUpdateKeys, &update, &copies,
                                           GpuUpdateSharedBytes(kMaxGpuUpdateKeys));
  EXPECT_EQ(largest, fits + 1);
  table->EndSample(largest);
}

}  // namespace
}  // namespace gearjax
