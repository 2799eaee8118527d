// Tests of GPU priority updates staged in host memory, run here as the stream's
// host functions would run them: Apply updates and counts; a bad value changes
// nothing, counts -1 and is raised once by the next table lookup; a closed
// table counts -1 and keeps nothing; buffers are pooled (pinned ones apart
// from plain ones) and released safely from inside a stream callback; many
// threads updating at once lose nothing.
#include "core/gpu/staged_update.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "core/gpu/fake_pinned.h"
#include "core/table/registry.h"
#include "core/table/table_gpu.h"

namespace gearjax {
namespace {

using fake_pinned::released;
const MappedAllocator& kFakePinned = fake_pinned::kAllocator;

TableSpec Spec(int64_t capacity) {
  TableSpec spec;
  spec.name = "staged";
  spec.columns.push_back({"x", 4, std::vector<uint8_t>(4, 0)});
  spec.capacity = capacity;
  spec.max_length = 4;
  return spec;
}

int64_t Put(Table& table, double priority) {
  const int32_t value = 7;
  return table.Insert({&value}, 1, priority);
}

double PriorityOf(Table& table, int64_t key) {
  std::vector<ItemInfo> items = table.PinItems(&key, 1);
  std::vector<int64_t> slots;
  for (const ItemInfo& item : items) slots.push_back(item.slot);
  table.UnpinSlots(slots);
  return items.empty() ? std::nan("") : items[0].priority;
}

// What the CUDA handler's copies and host functions do, in their order.
int32_t RunStaged(const std::shared_ptr<Table>& table, const std::vector<int32_t>& keys,
                  const std::vector<float>& priorities) {
  StagedUpdate* update = StagedUpdate::Take(table, KeyFormat::kInt32, PriorityFormat::kFloat32,
                                            static_cast<int64_t>(keys.size()));
  if (!keys.empty()) {
    std::memcpy(update->keys(), keys.data(), keys.size() * sizeof(int32_t));
    std::memcpy(update->priorities(), priorities.data(), priorities.size() * sizeof(float));
  }
  int32_t count;
  {
    StreamCallbackScope callback;
    update->Apply();
    count = *update->count();
    StagedUpdate::Recycle(update);
  }
  DrainDeferredReleases();
  return count;
}

class StagedUpdateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DrainDeferredReleases();
    released.clear();
  }
  void TearDown() override {
    SetMappedAllocator(nullptr);
    DrainDeferredReleases();
  }
};

TEST_F(StagedUpdateTest, AppliesAndCountsLiveKeys) {
  auto table = std::make_shared<Table>(Spec(4));
  const int64_t a = Put(*table, 1), b = Put(*table, 1);
  const float subnormal = std::numeric_limits<float>::denorm_min();
  // 99 names nothing stored; b appears twice: the last value wins.
  EXPECT_EQ(RunStaged(table, {static_cast<int32_t>(a), 99, static_cast<int32_t>(b),
                              static_cast<int32_t>(b)},
                      {2.5f, 3.0f, 4.0f, 0.0f}),
            3);
  EXPECT_EQ(PriorityOf(*table, a), 2.5);
  EXPECT_EQ(PriorityOf(*table, b), 0.0);
  // A float32 subnormal is decoded as the value it is (a normal float64),
  // not flushed to 0 as XLA's threads would.
  EXPECT_EQ(RunStaged(table, {static_cast<int32_t>(a)}, {subnormal}), 1);
  EXPECT_EQ(PriorityOf(*table, a), static_cast<double>(subnormal));
  EXPECT_GT(PriorityOf(*table, a), 0.0);
  EXPECT_EQ(RunStaged(table, {}, {}), 0);
  EXPECT_EQ(table->GetStats().counters.priority_updates, 4);
  table->RaiseDeferredError();  // nothing failed
}

TEST_F(StagedUpdateTest, ABadValueChangesNothingAndIsRaisedOnceByTheNextLookup) {
  auto table = std::make_shared<Table>(Spec(4));
  const int64_t a = Put(*table, 1), b = Put(*table, 1);
  const int64_t handle = RegisterTable(table);
  EXPECT_EQ(RunStaged(table, {static_cast<int32_t>(a), static_cast<int32_t>(b)},
                      {5.0f, std::nanf("")}),
            -1);
  EXPECT_EQ(PriorityOf(*table, a), 1.0);  // the good entry is not applied either
  EXPECT_EQ(table->GetStats().counters.priority_updates, 0);
  try {
    LookUpTable(handle);
    FAIL() << "the deferred error was not raised";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("earlier GPU program failed and changed nothing"), std::string::npos)
        << message;
    EXPECT_NE(message.find("entry 1"), std::string::npos) << message;
  }
  EXPECT_EQ(LookUpTable(handle), table);  // once only
  UnregisterTable(handle);
}

TEST_F(StagedUpdateTest, LaterFailuresAreCountedWithTheFirst) {
  auto table = std::make_shared<Table>(Spec(4));
  const int32_t a = static_cast<int32_t>(Put(*table, 1));
  EXPECT_EQ(RunStaged(table, {a}, {-1.0f}), -1);
  EXPECT_EQ(RunStaged(table, {a}, {INFINITY}), -1);
  EXPECT_EQ(RunStaged(table, {a}, {-2.0f}), -1);
  try {
    table->RaiseDeferredError();
    FAIL() << "nothing raised";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("-1"), std::string::npos) << message;  // the first
    EXPECT_NE(message.find("and 2 later updates failed too"), std::string::npos) << message;
  }
  table->RaiseDeferredError();  // nothing left
}

TEST_F(StagedUpdateTest, AClosedTableCountsMinusOneAndKeepsNothing) {
  auto table = std::make_shared<Table>(Spec(4));
  const int32_t a = static_cast<int32_t>(Put(*table, 1));
  ASSERT_TRUE(table->Close(1.0));
  EXPECT_EQ(RunStaged(table, {a}, {2.0f}), -1);
  table->RaiseDeferredError();  // nothing kept
}

TEST_F(StagedUpdateTest, UpdatesInFlightMakeAnAllZeroPrioritizedSampleWait) {
  auto table = std::make_shared<Table>(Spec(4));
  const int32_t a = static_cast<int32_t>(Put(*table, 0));
  const SampleRequest prioritized{Strategy::kPrioritized, 1.0, 0, 2, 0};
  const SampleRequest uniform{Strategy::kUniform, 0, 0, 2, 0};
  EXPECT_FALSE(TableGpu(*table).WaitsForStagedUpdates(prioritized));  // nothing in flight
  StagedUpdate* update = StagedUpdate::Take(table, KeyFormat::kInt32, PriorityFormat::kFloat32, 1);
  std::memcpy(update->keys(), &a, sizeof(a));
  const float one = 1.0f;
  std::memcpy(update->priorities(), &one, sizeof(one));
  EXPECT_TRUE(TableGpu(*table).WaitsForStagedUpdates(prioritized));  // every priority 0 now
  EXPECT_FALSE(TableGpu(*table).WaitsForStagedUpdates(uniform));     // priorities do not matter
  {
    StreamCallbackScope callback;
    update->Apply();
  }
  EXPECT_FALSE(TableGpu(*table).WaitsForStagedUpdates(prioritized));  // applied
  StagedUpdate::Recycle(update);
  EXPECT_FALSE(TableGpu(*table).WaitsForStagedUpdates(prioritized));
  // One taken and recycled without being applied (an enqueue failed) is no
  // longer in flight either.
  StagedUpdate* never = StagedUpdate::Take(table, KeyFormat::kInt32, PriorityFormat::kFloat32, 1);
  std::memcpy(never->keys(), &a, sizeof(a));
  const float zero = 0.0f;
  std::memcpy(never->priorities(), &zero, sizeof(zero));
  StagedUpdate::Recycle(never);
  EXPECT_FALSE(TableGpu(*table).WaitsForStagedUpdates(prioritized));
}

TEST_F(StagedUpdateTest, RefusesBadSizes) {
  auto table = std::make_shared<Table>(Spec(4));
  EXPECT_THROW(StagedUpdate::Take(table, KeyFormat::kInt64, PriorityFormat::kFloat64, -1),
               InvalidArgument);
  EXPECT_THROW(StagedUpdate::Take(table, KeyFormat::kInt64, PriorityFormat::kFloat64,
                                  int64_t{1} << 31),
               InvalidArgument);
}

TEST_F(StagedUpdateTest, BuffersArePooledAndPinnedOnesKeptApart) {
  auto table = std::make_shared<Table>(Spec(4));
  StagedUpdate* plain = StagedUpdate::Take(table, KeyFormat::kInt64, PriorityFormat::kFloat64, 8);
  EXPECT_FALSE(plain->pinned());
  EXPECT_GE(plain->key_bytes(), 64u);
  EXPECT_GE(plain->priority_bytes(), 64u);
  EXPECT_EQ(*plain->count(), -1);
  void* plain_memory = plain->keys();
  StagedUpdate::Recycle(plain);
  const size_t pooled = StagedUpdate::PoolSize();
  StagedUpdate* again = StagedUpdate::Take(table, KeyFormat::kInt32, PriorityFormat::kFloat32, 4);
  EXPECT_EQ(StagedUpdate::PoolSize(), pooled - 1);  // a pooled buffer, reused
  EXPECT_FALSE(again->pinned());
  StagedUpdate::Recycle(again);

  SetMappedAllocator(&kFakePinned);
  StagedUpdate* pinned = StagedUpdate::Take(table, KeyFormat::kInt32, PriorityFormat::kFloat32, 4);
  EXPECT_TRUE(pinned->pinned());
  EXPECT_NE(pinned->keys(), plain_memory);  // plain memory is not handed out as pinned
  // Too big for the pooled buffers: a new, larger one.
  StagedUpdate* big =
      StagedUpdate::Take(table, KeyFormat::kInt64, PriorityFormat::kFloat64, 100000);
  EXPECT_GE(big->key_bytes(), 800000u);
  StagedUpdate::Recycle(pinned);
  StagedUpdate::Recycle(big);

  // A plain buffer recycled while pinned memory is handed out is freed, not
  // kept (Take would never hand it out).
  SetMappedAllocator(nullptr);
  StagedUpdate* stray = StagedUpdate::Take(table, KeyFormat::kInt32, PriorityFormat::kFloat32, 1);
  SetMappedAllocator(&kFakePinned);
  const size_t before_stray = StagedUpdate::PoolSize();
  StagedUpdate::Recycle(stray);
  EXPECT_EQ(StagedUpdate::PoolSize(), before_stray);

  // The pool keeps at most kMaxPooled buffers; the rest are freed, and freed
  // only outside stream callbacks.
  std::vector<StagedUpdate*> many;
  for (size_t i = 0; i < StagedUpdate::kMaxPooled + 3; ++i) {
    many.push_back(StagedUpdate::Take(table, KeyFormat::kInt32, PriorityFormat::kFloat32, 1));
  }
  {
    StreamCallbackScope callback;
    for (StagedUpdate* u : many) StagedUpdate::Recycle(u);
    EXPECT_TRUE(released.empty());
  }
  EXPECT_EQ(StagedUpdate::PoolSize(), StagedUpdate::kMaxPooled);
  EXPECT_GT(DrainDeferredReleases(), 0u);
  EXPECT_FALSE(released.empty());
}

TEST_F(StagedUpdateTest, TheLastTableReferenceDroppedByRecycleReleasesNothingInTheCallback) {
  SetMappedAllocator(&kFakePinned);
  TableSpec spec = Spec(4);
  spec.gpu_mapped = true;
  auto table = std::make_shared<Table>(spec);
  StagedUpdate* update = StagedUpdate::Take(table, KeyFormat::kInt32, PriorityFormat::kFloat32, 0);
  table.reset();  // the staged update holds the last reference
  {
    StreamCallbackScope callback;
    update->Apply();
    EXPECT_EQ(*update->count(), 0);
    StagedUpdate::Recycle(update);
    EXPECT_TRUE(released.empty());
  }
  EXPECT_GT(DeferredReleases(), 0u);
  DrainDeferredReleases();
  EXPECT_FALSE(released.empty());
}

TEST_F(StagedUpdateTest, ConcurrentUpdatesAndInsertsLoseNothing) {
  auto table = std::make_shared<Table>(Spec(64));
  std::vector<int32_t> keys;
  for (int i = 0; i < 32; ++i) keys.push_back(static_cast<int32_t>(Put(*table, 1)));
  constexpr int kThreads = 4, kRounds = 200;
  std::vector<std::thread> threads;
  std::vector<int64_t> counted(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        counted[t] += RunStaged(table, keys, std::vector<float>(keys.size(), 1.0f + t));
      }
    });
  }
  // Inserts alongside: they take the 32 free slots, evicting nothing.
  for (int i = 0; i < 32; ++i) Put(*table, 1);
  for (std::thread& thread : threads) thread.join();
  int64_t total = 0;
  for (int64_t c : counted) total += c;
  EXPECT_EQ(total, int64_t{kThreads} * kRounds * 32);
  EXPECT_EQ(table->GetStats().counters.priority_updates, total);
  std::set<double> last;
  for (int32_t key : keys) last.insert(PriorityOf(*table, key));
  EXPECT_EQ(last.size(), 1u);  // each update is applied whole, under the table's mutex
}

}  // namespace
}  // namespace gearjax
