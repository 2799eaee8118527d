// The CUDA memory hooks of table arenas (core/memory.h): GPU-mapped pinned
// host memory for placement "host" and GPU memory for placement "device",
// the host's copies in and out of GPU memory, and their registration when a
// GPU is usable (InitCudaMemory). The FFI handlers check tables against them.
#include "cuda/memory_hooks.h"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "cuda/ffi_cuda.h"

namespace gearjax {
namespace {

void* AllocateMapped(size_t bytes, void** device_address) {
  void* host = nullptr;
  if (cudaHostAlloc(&host, bytes, cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error state
    return nullptr;
  }
  if (cudaHostGetDevicePointer(device_address, host, 0) != cudaSuccess) {
    cudaFreeHost(host);
    cudaGetLastError();
    return nullptr;
  }
  return host;
}

void FreeMappedHost(void* host) { cudaFreeHost(host); }

}  // namespace

const MappedAllocator kCudaMappedAllocator{AllocateMapped, FreeMappedHost};

namespace {

// GPU memory for placement "device", from cudaMalloc, beside XLA's own pool:
// XLA preallocates 75% of the GPU by default, so device tables need
// XLA_PYTHON_CLIENT_MEM_FRACTION lowered (or XLA_PYTHON_CLIENT_PREALLOCATE=false);
// see gearjax/table.py.
void* AllocateDevice(size_t bytes) {
  void* device = nullptr;
  if (cudaMalloc(&device, bytes) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return device;
}

void FreeDevice(void* device) { cudaFree(device); }

// Host writes and reads of device tables (inserts, get, save): synchronous
// copies. cudaMemcpy runs on the legacy default stream, which XLA's
// non-blocking streams do not wait for; the slot protocol (pins, tickets)
// keeps the two apart: a slot is written only once no enqueued kernel may
// read it, and published only after CopyIn returns. So CopyIn must not return
// before the bytes have landed: from pageable memory cudaMemcpy may return
// once they are staged, with the DMA still in flight, so the legacy stream is
// synchronised after it (a slot published earlier could be gathered half
// written).
void CopyIn(void* device_dst, const void* host_src, size_t bytes) {
  cudaError_t error = cudaMemcpy(device_dst, host_src, bytes, cudaMemcpyHostToDevice);
  if (error == cudaSuccess) error = cudaStreamSynchronize(cudaStreamLegacy);
  if (error != cudaSuccess) {
    throw std::runtime_error(std::string("copying into GPU memory: ") + cudaGetErrorString(error));
  }
}

void CopyOut(void* host_dst, const void* device_src, size_t bytes) {
  const cudaError_t error = cudaMemcpy(host_dst, device_src, bytes, cudaMemcpyDeviceToHost);
  if (error != cudaSuccess) {
    throw std::runtime_error(std::string("copying from GPU memory: ") + cudaGetErrorString(error));
  }
}

size_t FreeDeviceBytes() {
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return free;
}

}  // namespace

int CurrentDevice() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return device;
}

namespace {
bool SetDevice(int device) {
  if (cudaSetDevice(device) == cudaSuccess) return true;
  cudaGetLastError();
  return false;
}
}  // namespace

const DeviceMemory kCudaDeviceMemory{AllocateDevice, FreeDevice,      CopyIn,
                                     CopyOut,        FreeDeviceBytes, CurrentDevice,
                                     SetDevice};

std::string CudaError(const char* what, cudaError_t error) {
  return std::string(what) + ": " + cudaGetErrorString(error);
}


bool InitCudaMemory() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    return false;
  }
  SetMappedAllocator(&kCudaMappedAllocator);
  SetDeviceMemory(&kCudaDeviceMemory);
  return true;
}

}  // namespace gearjax
