// Launching a GPU priority update (core/gpu/update_block.h) on a CUDA stream.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "core/gpu/update_block.h"

namespace gearjax {

// The shared memory, in bytes, the update kernel may use on the current GPU:
// the device's opt-in maximum a block (cudaDevAttrMaxSharedMemoryPerBlockOptin,
// less the kernel's static use), read once per GPU and granted to the kernel
// as far as the largest update needs; 48 KiB (what a launch gets unasked)
// where that fails. TableGpu::BeginUpdate stages the updates that need more
// (GpuUpdateFits): 2,049-4,096 keys on Turing's 64 KiB.
size_t PriorityUpdateSharedLimit();

// One block applies `update` (its n keys and priorities at device addresses,
// GpuUpdateFits(n, PriorityUpdateSharedLimit())) and reports its ticket
// through update.completion.
cudaError_t LaunchPriorityUpdate(const GpuUpdate& update, cudaStream_t stream);

// cudaSuccess when the update kernel has an image for the current GPU.
cudaError_t PriorityUpdateKernelRunsHere();

}  // namespace gearjax
