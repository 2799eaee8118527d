// Process-wide map from table handle to table (see registry.h).
#include "registry.h"

#include <mutex>
#include <unordered_map>

namespace gearjax {
namespace {

struct Registry {
  std::mutex mu;
  int64_t next_handle = 1;
  std::unordered_map<int64_t, std::shared_ptr<Table>> tables;
};

Registry& GetRegistry() {
  static Registry* registry = new Registry();  // never destroyed: handlers may outlive statics
  return *registry;
}

}  // namespace

int64_t RegisterTable(std::shared_ptr<Table> table) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  const int64_t handle = r.next_handle++;
  r.tables.emplace(handle, std::move(table));
  return handle;
}

std::shared_ptr<Table> FindTable(int64_t handle) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.tables.find(handle);
  return it == r.tables.end() ? nullptr : it->second;
}

void UnregisterTable(int64_t handle) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.tables.erase(handle);
}

}  // namespace gearjax
