// Launching the copy into sum trees' mirrors in GPU memory
// (core/gpu/mirror_block.h) on a CUDA stream.
#pragma once

#include <cuda_runtime.h>

#include "core/gpu/mirror_block.h"

namespace gearjax {

// One thread per node copied; nothing to launch when copies.n is 0.
cudaError_t LaunchMirrorCopies(const MirrorCopies& copies, cudaStream_t stream);

// cudaSuccess when the copy kernel has an image for the current GPU.
cudaError_t MirrorKernelRunsHere();

}  // namespace gearjax
