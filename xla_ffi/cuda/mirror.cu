// The copy into sum trees' mirrors in GPU memory: each thread runs
// CopyMirrorNode (core/gpu/mirror_block.h), the code the CPU emulator runs.
#include "cuda/mirror.cuh"

#include <algorithm>

namespace gearjax {
namespace {

constexpr int kThreadsPerBlock = 256;

__global__ void MirrorCopyKernel(const MirrorCopies copies, int64_t total) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    CopyMirrorNode(copies, i);
  }
}

}  // namespace

cudaError_t LaunchMirrorCopies(const MirrorCopies& copies, cudaStream_t stream) {
  const int64_t total = MirrorCopyNodes(copies);
  if (total <= 0) return cudaSuccess;
  // A whole tree of 10^7 leaves is 1.1e7 nodes: a grid of at most 4096
  // blocks strides over it.
  const int64_t blocks = std::min<int64_t>((total + kThreadsPerBlock - 1) / kThreadsPerBlock, 4096);
  cudaGetLastError();  // not this launch's (see LaunchGather)
  MirrorCopyKernel<<<static_cast<unsigned>(blocks), kThreadsPerBlock, 0, stream>>>(copies, total);
  return cudaGetLastError();
}

cudaError_t MirrorKernelRunsHere() {
  cudaFuncAttributes attributes;
  return cudaFuncGetAttributes(&attributes, MirrorCopyKernel);
}

}  // namespace gearjax
