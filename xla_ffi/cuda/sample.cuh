// Launching the fused GPU sample (core/gpu/sample_block.h) on a CUDA stream.
#pragma once

#include <cuda_runtime.h>

#include "core/gpu/sample_block.h"

namespace gearjax {

// One block per row: selects from `selection` with the seed in device memory
// and gathers the row into params' outputs (params.draws is not read).
// Requires FusesSample(params).
cudaError_t LaunchFusedSample(const GpuSelection& selection, const uint32_t* seed,
                              int64_t window, const GatherParams& params, cudaStream_t stream);

// cudaSuccess when the fused kernel has an image for the current GPU.
cudaError_t FusedSampleKernelRunsHere();

}  // namespace gearjax
