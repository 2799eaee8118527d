// Where a table's arena comes from. By default, aligned host memory. A CUDA
// build registers a mapped-allocator at import when a GPU is present: pinned
// host memory mapped into the GPU's address space, so kernels read it
// zero-copy. The core itself never calls CUDA.
#pragma once

#include <cstddef>

namespace gearjax {

struct MappedAllocator {
  // Returns pinned, GPU-mapped host memory of `bytes` and writes its device
  // address; nullptr if it cannot (the arena then falls back to plain memory).
  void* (*allocate)(size_t bytes, void** device_address);
  void (*release)(void* host);
};

// nullptr (the default) means no GPU mapping is available.
void SetMappedAllocator(const MappedAllocator* allocator);
const MappedAllocator* GetMappedAllocator();

}  // namespace gearjax
