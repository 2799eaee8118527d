// The process-wide memory hooks (see memory.h).
#include "core/memory.h"

#include <atomic>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/thread_annotations.h"

namespace gearjax {
namespace {
std::atomic<const MappedAllocator*> mapped_allocator{nullptr};
std::atomic<const DeviceMemory*> device_memory{nullptr};

thread_local int callback_depth = 0;

// One queued release: the hooks and the pointer (exactly one hook set).
struct Deferred {
  const MappedAllocator* mapped;
  const DeviceMemory* device;
  void* pointer;
};

struct DeferredQueue {
  Mutex mu;
  std::vector<Deferred> items GEARJAX_GUARDED_BY(mu);
  std::atomic<size_t> size{0};
};

DeferredQueue& Queue() {
  static DeferredQueue* queue = new DeferredQueue();  // never destroyed: callbacks may outlive statics
  return *queue;
}

void Defer(Deferred item) {
  DeferredQueue& q = Queue();
  MutexLock lock(q.mu);
  q.items.push_back(item);
  q.size.store(q.items.size());
}
}  // namespace

void SetMappedAllocator(const MappedAllocator* allocator) { mapped_allocator.store(allocator); }
const MappedAllocator* GetMappedAllocator() { return mapped_allocator.load(); }

void SetDeviceMemory(const DeviceMemory* memory) { device_memory.store(memory); }
const DeviceMemory* GetDeviceMemory() { return device_memory.load(); }

void ReleaseMapped(const MappedAllocator* allocator, void* host) {
  if (host == nullptr) return;
  if (callback_depth > 0) return Defer({allocator, nullptr, host});
  allocator->release(host);
}

void ReleaseDevice(const DeviceMemory* memory, void* device) {
  if (device == nullptr) return;
  if (callback_depth > 0) return Defer({nullptr, memory, device});
  memory->release(device);
}

DeviceScope::DeviceScope(const DeviceMemory* memory, int device) {
  if (memory == nullptr || device < 0 || memory->set_device == nullptr ||
      memory->current_device == nullptr) {
    return;
  }
  const int current = memory->current_device();
  if (current == device) return;
  if (!memory->set_device(device)) {
    throw std::runtime_error("could not make GPU " + std::to_string(device) + " current");
  }
  memory_ = memory;
  previous_ = current;
}

DeviceScope::~DeviceScope() {
  if (memory_ != nullptr) memory_->set_device(previous_);
}

StreamCallbackScope::StreamCallbackScope() { ++callback_depth; }
StreamCallbackScope::~StreamCallbackScope() { --callback_depth; }

bool InStreamCallback() { return callback_depth > 0; }

size_t DrainDeferredReleases() {
  DeferredQueue& q = Queue();
  if (callback_depth > 0 || q.size.load() == 0) return 0;
  std::vector<Deferred> items;
  {
    MutexLock lock(q.mu);
    items.swap(q.items);
    q.size.store(0);
  }
  for (const Deferred& d : items) {
    if (d.mapped != nullptr) d.mapped->release(d.pointer);
    if (d.device != nullptr) d.device->release(d.pointer);
  }
  return items.size();
}

size_t DeferredReleases() { return Queue().size.load(); }

}  // namespace gearjax
