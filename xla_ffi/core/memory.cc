// The process-wide mapped allocator (see memory.h).
#include "memory.h"

#include <atomic>

namespace gearjax {
namespace {
std::atomic<const MappedAllocator*> mapped_allocator{nullptr};
}  // namespace

void SetMappedAllocator(const MappedAllocator* allocator) { mapped_allocator.store(allocator); }
const MappedAllocator* GetMappedAllocator() { return mapped_allocator.load(); }

}  // namespace gearjax
