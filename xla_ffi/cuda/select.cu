// The GPU selection kernel: each thread runs SelectRow (core/gpu/select_block.h),
// the same code the CPU emulator checks against the CPU handler.
#include "cuda/select.cuh"

#include "core/gpu/select_block.h"

namespace gearjax {
namespace {

constexpr int kThreadsPerBlock = 256;

__global__ void SelectKernel(const GpuSelection selection, const uint32_t* seed, int64_t window,
                             int64_t batch, Draw* draws) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  const uint32_t words[2] = {seed[0], seed[1]};
  draws[b] = SelectRow(selection, words, window, b);
}

}  // namespace

cudaError_t LaunchSelect(const GpuSelection& selection, const uint32_t* seed, int64_t window,
                         int64_t batch, Draw* draws, cudaStream_t stream) {
  const int64_t blocks = (batch + kThreadsPerBlock - 1) / kThreadsPerBlock;
  if (batch < 1 || blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
  cudaGetLastError();  // not this launch's (see LaunchGather)
  SelectKernel<<<static_cast<unsigned>(blocks), kThreadsPerBlock, 0, stream>>>(
      selection, seed, window, batch, draws);
  return cudaGetLastError();
}

cudaError_t SelectKernelRunsHere() {
  cudaFuncAttributes attributes;
  return cudaFuncGetAttributes(&attributes, SelectKernel);
}

}  // namespace gearjax
