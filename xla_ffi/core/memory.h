// Where a table's memory comes from. The core itself never calls CUDA: a CUDA
// build registers two sets of hooks at import when a GPU is present.
//  * MappedAllocator: pinned host memory mapped into the GPU's address space,
//    so kernels read it zero-copy (placement "host"). Without it, arenas are
//    aligned ordinary memory.
//  * DeviceMemory: GPU memory (placement "device"). The host never touches it
//    directly; every host read and write goes through copy_in / copy_out.
#pragma once

#include <cstddef>

namespace gearjax {

struct MappedAllocator {
  // Returns pinned, GPU-mapped host memory of `bytes` and writes its device
  // address; nullptr if it cannot (the arena then falls back to plain memory).
  void* (*allocate)(size_t bytes, void** device_address);
  void (*release)(void* host);
};

struct DeviceMemory {
  // GPU memory of `bytes`, or nullptr if it cannot be had.
  void* (*allocate)(size_t bytes);
  void (*release)(void* device);
  // Synchronous copies between host memory and GPU memory; they throw
  // std::runtime_error on failure.
  void (*copy_in)(void* device_dst, const void* host_src, size_t bytes);
  void (*copy_out)(void* host_dst, const void* device_src, size_t bytes);
  // GPU memory free right now (what "auto" placement compares a table with).
  size_t (*free_bytes)();
};

// nullptr (the default) means no GPU mapping is available.
void SetMappedAllocator(const MappedAllocator* allocator);
const MappedAllocator* GetMappedAllocator();

// nullptr (the default) means no GPU memory is available.
void SetDeviceMemory(const DeviceMemory* memory);
const DeviceMemory* GetDeviceMemory();

}  // namespace gearjax
