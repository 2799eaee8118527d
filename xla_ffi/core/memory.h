// Where a table's memory comes from. The core itself never calls CUDA: a CUDA
// build registers two sets of hooks at import when a GPU is present.
//  * MappedAllocator: pinned host memory mapped into the GPU's address space,
//    so kernels read it zero-copy (placement "host"). Without it, arenas are
//    aligned ordinary memory.
//  * DeviceMemory: GPU memory (placement "device"). The host never touches it
//    directly; every host read and write goes through copy_in / copy_out.
//
// Memory from the hooks is given back through ReleaseMapped and ReleaseDevice
// below, never through the hooks directly: a table's last reference can be
// dropped inside a CUDA stream callback (the host function that returns a GPU
// sample's tickets holds one), where CUDA calls are not allowed. Inside such a
// callback (a StreamCallbackScope) releases are queued instead, and done by
// the next DrainDeferredReleases, which every table lookup and registration
// runs (registry.cc): the next FFI call or table made in the process.
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
  // Synchronous copies between host memory and GPU memory: the bytes have
  // landed when they return (a slot is published right after copy_in; see
  // Table::InsertWith). They throw std::runtime_error on failure.
  void (*copy_in)(void* device_dst, const void* host_src, size_t bytes);
  void (*copy_out)(void* host_dst, const void* device_src, size_t bytes);
  // GPU memory free right now (what "auto" placement compares a table with).
  size_t (*free_bytes)();
  // The calling thread's current GPU, where allocate allocates; nullptr: a
  // process with one GPU (device 0).
  int (*current_device)() = nullptr;
  // Makes GPU `device` the calling thread's current one; false if it cannot
  // be. nullptr: a process with one GPU.
  bool (*set_device)(int device) = nullptr;
};

// GPU `device` current on the calling thread while this lives (the previous
// one current again after), where `memory` can switch GPUs and it is not
// already; device < 0 leaves the current one. Throws std::runtime_error if
// the GPU cannot be made current.
class DeviceScope {
 public:
  DeviceScope(const DeviceMemory* memory, int device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  const DeviceMemory* memory_ = nullptr;
  int previous_ = -1;
};

// nullptr (the default) means no GPU mapping is available.
void SetMappedAllocator(const MappedAllocator* allocator);
const MappedAllocator* GetMappedAllocator();

// nullptr (the default) means no GPU memory is available.
void SetDeviceMemory(const DeviceMemory* memory);
const DeviceMemory* GetDeviceMemory();

// Give memory back to the hooks that made it: at once, or queued when called
// inside a StreamCallbackScope on this thread.
void ReleaseMapped(const MappedAllocator* allocator, void* host);
void ReleaseDevice(const DeviceMemory* memory, void* device);

// Marks this thread as running a CUDA stream callback while it lives (scopes
// nest).
class StreamCallbackScope {
 public:
  StreamCallbackScope();
  ~StreamCallbackScope();
  StreamCallbackScope(const StreamCallbackScope&) = delete;
  StreamCallbackScope& operator=(const StreamCallbackScope&) = delete;
};

// Whether this thread is inside a StreamCallbackScope.
bool InStreamCallback();

// Does the queued releases (none when called inside a StreamCallbackScope);
// returns how many. Cheap when the queue is empty (one atomic load).
size_t DrainDeferredReleases();
// Releases queued and not yet done.
size_t DeferredReleases();

}  // namespace gearjax
