// The process-wide memory hooks (see memory.h).
#include "memory.h"

#include <atomic>

namespace gearjax {
namespace {
std::atomic<const MappedAllocator*> mapped_allocator{nullptr};
std::atomic<const DeviceMemory*> device_memory{nullptr};
}  // namespace

void SetMappedAllocator(const MappedAllocator* allocator) { mapped_allocator.store(allocator); }
const MappedAllocator* GetMappedAllocator() { return mapped_allocator.load(); }

void SetDeviceMemory(const DeviceMemory* memory) { device_memory.store(memory); }
const DeviceMemory* GetDeviceMemory() { return device_memory.load(); }

}  // namespace gearjax
