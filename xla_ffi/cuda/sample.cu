// The fused GPU sample kernel: each block runs FusedRowDraw (one thread) and
// GatherRow (every thread) of core/gpu/sample_block.h, the code the CPU emulator
// checks against the CPU handler, then reports itself done.
#include "cuda/sample.cuh"

namespace gearjax {
namespace {

constexpr int kThreadsPerBlock = 256;

__global__ void FusedSampleKernel(const GpuSelection selection, const uint32_t* seed,
                                  int64_t window, const GatherParams params) {
  __shared__ Draw draw;
  const int64_t b = blockIdx.x;
  if (threadIdx.x == 0) draw = FusedRowDraw(selection, seed, window, b);
  __syncthreads();  // the row's one draw, for every thread
  GatherRow(params, draw, b, threadIdx.x, blockDim.x);
  if (params.completion.done == nullptr) return;
  __syncthreads();  // every thread of the block has read what it copies
  if (threadIdx.x == 0) CompleteBlock(params.completion, gridDim.x);
}

}  // namespace

cudaError_t LaunchFusedSample(const GpuSelection& selection, const uint32_t* seed,
                              int64_t window, const GatherParams& params, cudaStream_t stream) {
  if (params.batch < 1 || params.batch > 0x7fffffff || !FusesSample(params)) {
    return cudaErrorInvalidConfiguration;
  }
  cudaGetLastError();  // not this launch's (see LaunchGather)
  FusedSampleKernel<<<static_cast<unsigned>(params.batch), kThreadsPerBlock, 0, stream>>>(
      selection, seed, window, params);
  return cudaGetLastError();
}

cudaError_t FusedSampleKernelRunsHere() {
  cudaFuncAttributes attributes;
  return cudaFuncGetAttributes(&attributes, FusedSampleKernel);
}

}  // namespace gearjax
