// Process-wide map from table handle to table (see registry.h).
#include "core/table/registry.h"

#include <pthread.h>

#include <atomic>
#include <unordered_map>

#include "core/memory.h"
#include "core/thread_annotations.h"

namespace gearjax {
namespace {

struct Registry {
  Mutex mu;
  int64_t next_handle GEARJAX_GUARDED_BY(mu) = 1;
  std::unordered_map<int64_t, std::shared_ptr<Table>> tables GEARJAX_GUARDED_BY(mu);
  // How closed tables were described, for the errors of programs compiled
  // against them (a few bytes per closed table).
  std::unordered_map<int64_t, std::string> closed GEARJAX_GUARDED_BY(mu);
};

std::atomic<int64_t> lookups{0};

// Held across fork (pthread_atfork): a child never inherits the map
// half-changed, nor its lock held by a thread the fork did not copy.
// (The analysis cannot follow a lock taken in one function and released in
// another.)
void LockForFork() GEARJAX_NO_THREAD_SAFETY_ANALYSIS;
void UnlockAfterFork() GEARJAX_NO_THREAD_SAFETY_ANALYSIS;

Registry& GetRegistry() {
  static Registry* registry = [] {
    pthread_atfork(&LockForFork, &UnlockAfterFork, &UnlockAfterFork);
    return new Registry();  // never destroyed: handlers may outlive statics
  }();
  return *registry;
}

void LockForFork() GEARJAX_NO_THREAD_SAFETY_ANALYSIS { GetRegistry().mu.lock(); }
void UnlockAfterFork() GEARJAX_NO_THREAD_SAFETY_ANALYSIS { GetRegistry().mu.unlock(); }

}  // namespace

int64_t RegisterTable(std::shared_ptr<Table> table) {
  DrainDeferredReleases();  // memory whose release a stream callback deferred (memory.h)
  Registry& r = GetRegistry();
  MutexLock lock(r.mu);
  const int64_t handle = r.next_handle++;
  r.tables.emplace(handle, std::move(table));
  return handle;
}

std::shared_ptr<Table> RegisteredTable(int64_t handle) {
  Registry& r = GetRegistry();
  MutexLock lock(r.mu);
  auto it = r.tables.find(handle);
  return it == r.tables.end() ? nullptr : it->second;
}

int64_t RegistryLookUps() { return lookups.load(std::memory_order_relaxed); }

std::shared_ptr<Table> LookUpTable(int64_t handle) {
  lookups.fetch_add(1, std::memory_order_relaxed);
  DrainDeferredReleases();  // memory whose release a stream callback deferred (memory.h)
  Registry& r = GetRegistry();
  MutexLock lock(r.mu);
  auto it = r.tables.find(handle);
  if (it != r.tables.end()) {
    std::shared_ptr<Table> table = it->second;
    lock.Unlock();
    table->RaiseDeferredError();  // a failed GPU priority update (staged_update.h), once
    return table;
  }
  auto closed = r.closed.find(handle);
  if (closed != r.closed.end()) {
    throw Closed(closed->second + " is closed; this program was compiled against it and "
                 "cannot run (a closed table is never used again: if another table, say one "
                 "from Table.load, is to take its place, trace the program again with that "
                 "one)");
  }
  throw Closed("no table has handle " + std::to_string(handle));
}

void UnregisterTable(int64_t handle) {
  Registry& r = GetRegistry();
  MutexLock lock(r.mu);
  auto it = r.tables.find(handle);
  if (it == r.tables.end()) return;
  r.closed.emplace(handle, it->second->Describe(handle));
  r.tables.erase(it);
}

}  // namespace gearjax
