// Launching a GPU priority update (core/gpu/update_block.h) on a CUDA stream.
#pragma once

#include <cuda_runtime.h>

#include "core/gpu/update_block.h"

namespace gearjax {

// One block applies `update` (its n <= kMaxGpuUpdateKeys keys and
// priorities at device addresses) and reports its ticket through
// update.completion.
cudaError_t LaunchPriorityUpdate(const GpuUpdate& update, cudaStream_t stream);

// cudaSuccess when the update kernel has an image for the current GPU.
cudaError_t PriorityUpdateKernelRunsHere();

}  // namespace gearjax
