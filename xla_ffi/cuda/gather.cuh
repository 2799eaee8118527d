// Launching the GPU gather (core/gpu/gather_block.h) on a CUDA stream.
#pragma once

#include <cuda_runtime.h>

#include "core/gpu/gather_block.h"

namespace gearjax {

// One launch for all rows and columns of a batch: grid (batch, columns,
// 64 KiB parts of the widest row), 256 threads a block.
cudaError_t LaunchGather(const GatherParams& params, cudaStream_t stream);

// cudaSuccess when the gather kernel has an image for the current GPU (this
// build's architectures include it); cudaErrorNoKernelImageForDevice else.
cudaError_t GatherKernelRunsHere();

}  // namespace gearjax
