// StagedUpdate: the pool of staging buffers and the host function's work (see
// staged_update.h).
#include "core/gpu/staged_update.h"

#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "core/common.h"
#include "core/table/table_gpu.h"
#include "core/thread_annotations.h"

namespace gearjax {
namespace {

constexpr size_t kMinCapacity = 4096;
constexpr size_t kAlignment = 64;

struct Pool {
  Mutex mu;
  std::vector<StagedUpdate*> free GEARJAX_GUARDED_BY(mu);
};

Pool& GetPool() {
  static Pool* pool = new Pool();  // never destroyed: stream callbacks may outlive statics
  return *pool;
}

size_t RoundUp(size_t bytes, size_t to) { return (bytes + to - 1) / to * to; }

}  // namespace

StagedUpdate* StagedUpdate::Take(std::shared_ptr<Table> table, KeyFormat keys,
                                 PriorityFormat priorities, int64_t n) {
  if (n < 0 || n > INT32_MAX) {
    throw InvalidArgument("a priority update takes at most 2^31 - 1 entries, got " +
                          std::to_string(n));
  }
  const size_t count = static_cast<size_t>(n);
  const size_t priorities_offset = RoundUp(count * KeyBytes(keys), kAlignment);
  const size_t count_offset =
      priorities_offset + RoundUp(count * PriorityBytes(priorities), kAlignment);
  const size_t needed = count_offset + sizeof(int32_t);

  const MappedAllocator* allocator = GetMappedAllocator();
  StagedUpdate* update = nullptr;
  {
    Pool& pool = GetPool();
    MutexLock lock(pool.mu);
    // Smallest fit, and only memory of the kind the allocator gives now.
    size_t best = pool.free.size();
    for (size_t i = 0; i < pool.free.size(); ++i) {
      const StagedUpdate* u = pool.free[i];
      if (u->allocator_ == allocator && u->capacity_ >= needed &&
          (best == pool.free.size() || u->capacity_ < pool.free[best]->capacity_)) {
        best = i;
      }
    }
    if (best < pool.free.size()) {
      update = pool.free[best];
      pool.free[best] = pool.free.back();
      pool.free.pop_back();
    }
  }
  if (update == nullptr) {
    size_t capacity = kMinCapacity;
    while (capacity < needed) capacity *= 2;
    void* memory = nullptr;
    const MappedAllocator* used = nullptr;
    if (allocator != nullptr) {
      void* device_address = nullptr;  // unused: the GPU reaches it through copies
      memory = allocator->allocate(capacity, &device_address);
      if (memory != nullptr) used = allocator;
    }
    if (memory == nullptr) memory = std::aligned_alloc(kAlignment, capacity);
    if (memory == nullptr) throw std::bad_alloc();
    update = new StagedUpdate(static_cast<uint8_t*>(memory), capacity, used);
  }
  TableGpu(*table).StagedUpdateEnqueued();
  update->table_ = std::move(table);
  update->applied_ = false;
  update->key_format_ = keys;
  update->priority_format_ = priorities;
  update->n_ = n;
  update->priorities_offset_ = priorities_offset;
  update->count_offset_ = count_offset;
  *update->count() = -1;
  return update;
}

void StagedUpdate::Recycle(StagedUpdate* update) {
  if (update == nullptr) return;
  if (!update->applied_) TableGpu(*update->table_).StagedUpdateApplied();  // never enqueued
  update->table_.reset();  // may be the last reference: its releases defer in callbacks
  {
    Pool& pool = GetPool();
    MutexLock lock(pool.mu);
    // Only memory of the kind Take hands out now is worth keeping.
    if (pool.free.size() < kMaxPooled && update->allocator_ == GetMappedAllocator()) {
      pool.free.push_back(update);
      return;
    }
  }
  update->Free();
}

void StagedUpdate::Free() {
  if (allocator_ != nullptr) {
    ReleaseMapped(allocator_, buffer_);
  } else {
    std::free(buffer_);
  }
  delete this;
}

size_t StagedUpdate::PoolSize() {
  Pool& pool = GetPool();
  MutexLock lock(pool.mu);
  return pool.free.size();
}

void StagedUpdate::Apply() {
  int32_t updated = -1;
  try {
    // Per thread (the stream's callback thread): no allocation per update.
    thread_local std::vector<int64_t> keys;
    thread_local std::vector<double> priorities;
    const size_t n = static_cast<size_t>(n_);
    DecodeKeys(key_format_, this->keys(), n, keys);
    DecodePriorities(priority_format_, this->priorities(), n, priorities);
    updated = static_cast<int32_t>(table_->UpdatePriorities(keys.data(), priorities.data(), n_));
  } catch (const Closed&) {
    // Every later call on the table fails with Closed: nothing to keep.
  } catch (const std::exception& e) {
    table_->DeferError(e.what());
  } catch (...) {
    table_->DeferError("unknown error");
  }
  *count() = updated;
  applied_ = true;
  TableGpu(*table_).StagedUpdateApplied();
}

}  // namespace gearjax
