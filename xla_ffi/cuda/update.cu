// The GPU priority-update kernel: one block runs the phases of
// core/gpu/update_block.h, the code the CPU emulator checks against
// Table::UpdatePriorities, with a block barrier between phases.
#include "cuda/update.cuh"

#include <atomic>

namespace gearjax {
namespace {

constexpr int kThreadsPerBlock = 512;

__global__ void PriorityUpdateKernel(const GpuUpdate u) {
  extern __shared__ long long shared[];  // GpuUpdateSharedBytes(u.n), 8-byte aligned
  const GpuUpdateShared s = CarveGpuUpdateShared(shared, u.n);
  const int64_t t = threadIdx.x, threads = blockDim.x;
  GpuUpdateClear(u, s, t, threads);
  GpuUpdateDeferredLeaves(u, t, threads);
  __syncthreads();  // deferred leaves before the update's own (which win)
  GpuUpdateCheck(u, s, t, threads);
  __syncthreads();
  const bool applied = *s.first_bad == u.n;  // the same for every thread after the barrier
  if (applied) GpuUpdateLeaves(u, s, t, threads);
  __syncthreads();  // leaves (and the records) before their parents
  for (int32_t level = 1; level < u.levels; ++level) {
    GpuUpdateParents(u, s, level, applied, t, threads);
    __syncthreads();  // this level before the one above
  }
  if (t == 0) GpuUpdateFinish(u, s);
}

// Per GPU: whether the kernel may use the shared memory of the largest update
// (over the 48 KiB a kernel gets unasked).
std::atomic<bool> shared_memory_raised[64];

}  // namespace

cudaError_t LaunchPriorityUpdate(const GpuUpdate& update, cudaStream_t stream) {
  if (update.n < 0 || update.n > kMaxGpuUpdateKeys) return cudaErrorInvalidConfiguration;
  cudaGetLastError();  // not this launch's (see LaunchGather)
  const size_t bytes = GpuUpdateSharedBytes(update.n);
  int device = 0;
  if (bytes > 48 * 1024 && cudaGetDevice(&device) == cudaSuccess && device >= 0 && device < 64 &&
      !shared_memory_raised[device].load(std::memory_order_acquire)) {
    const cudaError_t error =
        cudaFuncSetAttribute(PriorityUpdateKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(GpuUpdateSharedBytes(kMaxGpuUpdateKeys)));
    if (error != cudaSuccess) return error;
    shared_memory_raised[device].store(true, std::memory_order_release);
  }
  PriorityUpdateKernel<<<1, kThreadsPerBlock, bytes, stream>>>(update);
  return cudaGetLastError();
}

cudaError_t PriorityUpdateKernelRunsHere() {
  cudaFuncAttributes attributes;
  return cudaFuncGetAttributes(&attributes, PriorityUpdateKernel);
}

}  // namespace gearjax
