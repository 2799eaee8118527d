// The GPU priority-update kernel: one block runs the phases of
// core/gpu/update_block.h, the code the CPU emulator checks against
// Table::UpdatePriorities, with a block barrier between phases.
#include "cuda/update.cuh"

#include <algorithm>
#include <atomic>
#include <cstddef>

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

// Per GPU: PriorityUpdateSharedLimit's answer (0: not asked yet).
constexpr int kCachedDevices = 64;
std::atomic<size_t> shared_limit[kCachedDevices];

// What a launch may use without asking: 48 KiB a block (the kernel has no
// static shared memory; AskSharedLimit subtracts any it gains).
constexpr size_t kUnaskedSharedBytes = 48 * 1024;

// Asks the current GPU (`device`) for PriorityUpdateSharedLimit's answer and
// grants it to the kernel; 0 where a CUDA call fails (not remembered: asked
// again next time).
size_t AskSharedLimit(int device) {
  cudaFuncAttributes attributes;
  int optin = 0;
  if (cudaFuncGetAttributes(&attributes, PriorityUpdateKernel) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
          cudaSuccess ||
      static_cast<size_t>(optin) <= attributes.sharedSizeBytes) {
    return 0;
  }
  // Only what the largest update needs: asking for more than the device
  // allows fails (cudaErrorInvalidValue), as 81,984 B did on Turing.
  const size_t limit = std::min(static_cast<size_t>(optin) - attributes.sharedSizeBytes,
                                GpuUpdateSharedBytes(kMaxGpuUpdateKeys));
  if (limit > kUnaskedSharedBytes &&
      cudaFuncSetAttribute(PriorityUpdateKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(limit)) != cudaSuccess) {
    return 0;
  }
  return limit;
}

}  // namespace

size_t PriorityUpdateSharedLimit() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0) {
    cudaGetLastError();
    return kUnaskedSharedBytes;
  }
  const bool cached = device < kCachedDevices;
  if (cached) {
    if (const size_t known = shared_limit[device].load(std::memory_order_acquire)) return known;
  }
  const size_t limit = AskSharedLimit(device);
  if (limit == 0) {
    cudaGetLastError();  // not sticky: not the next launch's error
    return kUnaskedSharedBytes;
  }
  // After the grant: a caller that sees the limit may launch with it.
  if (cached) shared_limit[device].store(limit, std::memory_order_release);
  return limit;
}

cudaError_t LaunchPriorityUpdate(const GpuUpdate& update, cudaStream_t stream) {
  // BeginUpdate staged any update that does not fit (and the limit, once
  // known, was granted to the kernel).
  if (!GpuUpdateFits(update.n, PriorityUpdateSharedLimit())) return cudaErrorInvalidConfiguration;
  const size_t bytes = GpuUpdateSharedBytes(update.n);
  cudaGetLastError();  // not this launch's (see LaunchGather)
  PriorityUpdateKernel<<<1, kThreadsPerBlock, bytes, stream>>>(update);
  return cudaGetLastError();
}

cudaError_t PriorityUpdateKernelRunsHere() {
  cudaFuncAttributes attributes;
  return cudaFuncGetAttributes(&attributes, PriorityUpdateKernel);
}

}  // namespace gearjax
