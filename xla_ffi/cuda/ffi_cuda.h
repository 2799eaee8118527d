// CUDA side of the extension: the memory hooks for table arenas (mapped pinned
// host memory, GPU memory) and what the XLA FFI handlers registered for
// platform "CUDA" share (their list by name: ffi_handlers.h, CudaTargets).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/table/table.h"
#include "xla/ffi/api/ffi.h"

namespace gearjax {

// LookUpTable for a CUDA handler: also refuses a table whose memory the GPU
// cannot reach (TableGpu::CheckReachable: not made by this build's CUDA
// memory hooks) and one in another GPU's memory than the calling thread's
// current GPU (the one XLA runs the program on; TableGpu::CheckDevice).
std::shared_ptr<Table> LookUpTableForThisGpu(int64_t handle);
// The same checks of a table already resolved (a call site's: call_site.h).
std::shared_ptr<Table> ForThisGpu(std::shared_ptr<Table> table);

// Registers GPU-mapped pinned memory and GPU memory for table arenas
// (memory_hooks.cu) if a CUDA device is usable; returns whether one is.
bool InitCudaMemory();

// The CUDA architectures this build's kernels were compiled for ("90;100").
extern const char kCudaArchitecturesBuilt[];

// Empty when this build's kernels have an image for GPU `device` (the
// current one); else why not, saying how to rebuild. Every CUDA handler that
// looks up a table checks it once per GPU (LookUpTableForThisGpu).
std::string KernelImageProblem(int device);
// The same for any GPU, from any thread (its current GPU is restored).
std::string KernelImageProblemOn(int device);

}  // namespace gearjax
