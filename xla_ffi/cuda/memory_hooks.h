// The CUDA memory hooks of table arenas (memory_hooks.cu), for the CUDA FFI
// handlers: the ones a table must have been made with for a kernel to read
// it, the calling thread's GPU, and CUDA errors as text.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "core/memory.h"

namespace gearjax {

extern const MappedAllocator kCudaMappedAllocator;  // cudaHostAlloc, mapped and portable
extern const DeviceMemory kCudaDeviceMemory;        // cudaMalloc beside XLA's pool

// The calling thread's current GPU (0 if CUDA cannot say).
int CurrentDevice();

// "what: CUDA's description of error".
std::string CudaError(const char* what, cudaError_t error);

}  // namespace gearjax
