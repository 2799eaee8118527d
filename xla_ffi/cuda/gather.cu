// The GPU gather kernel: each block runs GatherBlock (core/gpu/gather_block.h),
// the same code the CPU emulator tests, with CUDA's indices.
#include "cuda/gather.cuh"

namespace gearjax {
namespace {

constexpr int kThreadsPerBlock = 256;

__global__ void GatherKernel(const GatherParams params) {
  GatherBlock(params, blockIdx.x, static_cast<int>(blockIdx.y), blockIdx.z, threadIdx.x,
              blockDim.x);
  if (params.completion.done == nullptr) return;
  __syncthreads();  // every thread of the block has read what it copies
  if (threadIdx.x == 0) {
    CompleteBlock(params.completion,
                  static_cast<uint64_t>(gridDim.x) * gridDim.y * gridDim.z);
  }
}

}  // namespace

cudaError_t LaunchGather(const GatherParams& params, cudaStream_t stream) {
  const int64_t parts = GatherParts(params);
  if (params.batch < 1 || params.batch > 0x7fffffff || parts > 65535) {
    return cudaErrorInvalidConfiguration;
  }
  const dim3 grid(static_cast<unsigned>(params.batch), static_cast<unsigned>(params.num_columns),
                  static_cast<unsigned>(parts));
  // A non-sticky error another library left on this thread is not this
  // launch's: clear it, so the check below reports this launch alone.
  cudaGetLastError();
  GatherKernel<<<grid, kThreadsPerBlock, 0, stream>>>(params);
  return cudaGetLastError();
}

cudaError_t GatherKernelRunsHere() {
  cudaFuncAttributes attributes;
  return cudaFuncGetAttributes(&attributes, GatherKernel);
}

}  // namespace gearjax
