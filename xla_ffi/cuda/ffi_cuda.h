// CUDA side of the extension: the memory hooks for table arenas (mapped pinned
// host memory, GPU memory) and the XLA FFI handlers registered for platform
// "CUDA".
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/table.h"
#include "xla/ffi/api/ffi.h"

namespace gearjax {

// LookUpTable for a CUDA handler: also refuses a table whose memory the GPU
// cannot reach (Table::CheckGpuReachable: not made by this build's CUDA
// memory hooks) and one in another GPU's memory than the calling thread's
// current GPU (the one XLA runs the program on; Table::CheckDevice).
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

XLA_FFI_DECLARE_HANDLER_SYMBOL(SampleCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(UpdatePrioritiesCuda);
// The same as instantiate and execute stages (call_site.h).
XLA_FFI_DECLARE_HANDLER_SYMBOL(SampleInstantiateCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(SampleExecuteCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(UpdateInstantiateCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(UpdateExecuteCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(InsertBatchCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(UpdateStepPrioritiesCuda);
// The xla exchange's steps of a ShardedTable (ffi_cuda_shard.cu).
XLA_FFI_DECLARE_HANDLER_SYMBOL(ShardTotalsCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(ShardTopsCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(ShardRankCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(ShardPlanCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(ShardServeCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(ShardKeysCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Int64FromWordsCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(ZerosCuda);

}  // namespace gearjax
