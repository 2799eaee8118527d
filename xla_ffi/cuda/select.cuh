// Launching GPU-side selection (core/gpu/select_block.h) on a CUDA stream.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/draw.h"
#include "core/gpu/gpu_selection.h"

namespace gearjax {

// One thread per row: draws `batch` rows from the seed in device memory into
// `draws` (device memory).
cudaError_t LaunchSelect(const GpuSelection& selection, const uint32_t* seed, int64_t window,
                         int64_t batch, Draw* draws, cudaStream_t stream);

// cudaSuccess when the selection kernel has an image for the current GPU.
cudaError_t SelectKernelRunsHere();

}  // namespace gearjax
