// Test-only: a MappedAllocator whose "pinned, GPU-mapped" memory is ordinary
// aligned memory mapped at its own address, and which records every release,
// so the core's tests can see what is released and when (see memory.h).
#pragma once

#include <cstdlib>
#include <vector>

#include "core/memory.h"

namespace gearjax::fake_pinned {

// Every pointer released so far, in order; tests clear it.
inline std::vector<void*> released;

inline void* Allocate(size_t bytes, void** device) {
  void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  *device = p;
  return p;
}

inline void Release(void* p) {
  released.push_back(p);
  std::free(p);
}

inline const MappedAllocator kAllocator{Allocate, Release};

}  // namespace gearjax::fake_pinned
