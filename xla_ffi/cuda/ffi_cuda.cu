// CUDA XLA FFI handlers. The gather always runs on the GPU, reading the table
// from GPU memory (placement "device") or zero-copy from GPU-mapped pinned
// host memory into XLA's output buffers on XLA's stream. Selection:
//
// * Uniform, Timestep, Prioritized: on the GPU, from the seed in device memory
//   and the sum trees, keys and lengths in mapped memory; no host
//   synchronisation. One kernel selects and gathers (sample.cu) where every
//   column's window fits one gather part, else a select kernel (select.cu)
//   writes the draws to scratch memory for the gather kernel. Slot protocol:
//   the handler takes a ticket (TableGpu::BeginSample, which also applies the
//   rate limiter) before enqueueing the kernels, and the last kernel's last
//   block writes it into the table's completion ring when every block has
//   read its rows (core/gpu/gpu_completions.h): nothing but the kernels goes on
//   the stream.
//   A writer that evicts a slot waits for every ticket taken before the
//   eviction (reading the ring); samples enqueued later never draw the slot.
// * TopK, Recent and constrained samples (order statistics, host-only
//   structures): selected on the host. The seed is copied back with a stream
//   synchronisation, the rows are drawn (Table::Select, which takes a
//   ticket) into pinned memory the table keeps for that ticket
//   (TableGpu::StagingFor), the gather reads them there and returns the ticket
//   through the ring as above.
//
// Priority updates never wait for the stream. Where the table allows
// (TableGpu::BeginUpdate: a Prioritized tree to update, up to
// kMaxGpuUpdateKeys keys and no more shared memory than the GPU gives a
// block, no TopK heap or min-priority remover keeping
// priorities in host memory), one kernel
// (update.cu) applies them to the slot records and Prioritized trees in
// mapped memory and reports its ticket through the ring; host writers keep
// out of the priorities until it has (Table::OwnPrioritiesLocked), but for
// inserts, which publish and leave their tree leaves to the next kernel or
// the host (GpuUpdateLedger's deferred leaves, core/gpu/gpu_updates.h). Otherwise
// the keys and priorities are copied into pinned host memory and a host
// function applies them in stream order (core/gpu/staged_update.h). Either way a
// bad value is raised by the next call on the table.
//
// insert_batch copies device arrays into the table on XLA's stream: the
// lengths and priorities come to the host first (one synchronisation), the
// trajectories' slots are reserved on the host (waiting for the samplers that
// may still read them, as every insert does), a chunk of rows at a time (up
// to half the slots; Table::InsertManyWith), all their columns are copied by
// cudaMemcpyAsync straight into the arena (device-to-device, or into mapped
// host memory), and the stream is synchronised once per chunk before its
// slots are published.
//
// sample and update_priorities are registered with an instantiate stage
// where gearjax/_ffi.py can (call_site.h): the table, the attributes and the
// request's checks once per call site; an execution only resolves the table
// (no registry), binds its buffers and enqueues.
//
// No handler is command-buffer compatible: each keeps host-side state (tickets,
// pins, the limiter, publication) that must run on every execution, and a
// recorded command buffer would replay only the kernels.
#include "cuda/ffi_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/gpu/gather_plan.h"
#include "core/gpu/kernel_check.h"
#include "core/gpu/staged_update.h"
#include "core/memory.h"
#include "core/table/table_gpu.h"
#include "cuda/gather.cuh"
#include "cuda/host_work.h"
#include "cuda/memory_hooks.h"
#include "cuda/mirror.cuh"
#include "cuda/sample.cuh"
#include "cuda/select.cuh"
#include "cuda/tickets.h"
#include "cuda/update.cuh"
#include "ffi/call_site.h"
#include "ffi/ffi_common.h"
#include "ffi/ffi_handlers.h"

namespace ffi = xla::ffi;

#ifndef GEARJAX_CUDA_ARCHITECTURES_BUILT
#define GEARJAX_CUDA_ARCHITECTURES_BUILT "unknown"
#endif

namespace gearjax {

const char kCudaArchitecturesBuilt[] = GEARJAX_CUDA_ARCHITECTURES_BUILT;

namespace {

// The copies a Begin asked for into the table's tree mirrors
// (core/gpu/tree_mirror.h), ahead of the kernel that reads them: one launch,
// none when nothing changed since the last.
ffi::Error CopyMirrors(Table& table, const MirrorCopies& copies, cudaStream_t stream) {
  if (copies.n == 0) return ffi::Error::Success();
  Count(HostWork::kLaunch);
  const cudaError_t error = LaunchMirrorCopies(copies, stream);
  if (error == cudaSuccess) return ffi::Error::Success();
  TableGpu(table).MirrorCopiesLost();  // the logs were taken: copy everything next time
  return Fail(CudaError("copying into the sum trees' GPU copies", error));
}

// Selection and gather both on the GPU (sum-tree strategies): one fused
// kernel where every column's window fits one gather part (FusesSample), else
// the select kernel into scratch draws and the gather kernel.
ffi::Error SampleOnDevice(cudaStream_t stream, ffi::ScratchAllocator& scratch, int device,
                          const uint32_t* seed, const std::shared_ptr<Table>& table,
                          const SampleRequest& request, int64_t width, bool pad_left,
                          const SampleOutputs& out) {
  GpuSelection selection;
  MirrorCopies copies;
  DeviceTicket ticket(table, TableGpu(*table).BeginSample(request, &selection, &copies, stream),
                      device, stream);
  // First: the copies were taken from the trees' logs, and a way out
  // before they are enqueued must say so (CopyMirrors).
  if (const ffi::Error copied = CopyMirrors(*table, copies, stream); copied.failure()) {
    return copied;
  }
  GatherParams params = PlanGather(*table, /*draws=*/nullptr, request.batch, width, pad_left,
                                   out, table->device_arena());
  params.completion = ticket.completion();
  cudaError_t error;
  if (FusesSample(params)) {
    Count(HostWork::kLaunch);
    error = LaunchFusedSample(selection, seed, request.window, params, stream);
  } else {
    Count(HostWork::kScratch);
    const std::optional<void*> draws = scratch.Allocate(request.batch * sizeof(Draw), 16);
    if (!draws.has_value()) return Fail("could not allocate scratch memory for the draws");
    params.draws = static_cast<Draw*>(*draws);
    Count(HostWork::kLaunch, 2);
    error = LaunchSelect(selection, seed, request.window, request.batch,
                         static_cast<Draw*>(*draws), stream);
    if (error == cudaSuccess) error = LaunchGather(params, stream);
  }
  if (error != cudaSuccess) return Fail(CudaError("launching the sample", error));
  ticket.HandToDevice();
  return ffi::Error::Success();
}

// `first` is the index of the keys result (1 when the call returns an order
// result first).
ffi::Error Sample(cudaStream_t stream, ffi::ScratchAllocator& scratch,
                  const ffi::Buffer<ffi::U32>& seed, ffi::RemainingRets& rets, size_t first,
                  const SampleSite& at) {
  SampleSite fresh;
  const SampleSite& site = Current(at, fresh);
  std::shared_ptr<Table> table = ForThisGpu(site.table.Resolve());
  const bool pad_left = site.attrs.pad_left != 0;
  const SampleCall call =
      BindSampleCall(*table, site, seed.element_count(), rets, first, SampleResults::kDevice);
  const SampleRequest& request = call.request;
  const int64_t batch = request.batch, width = call.width;
  const SampleOutputs& out = call.out;

  // Tickets taken from here on come back through the completion ring.
  const int device = CurrentDevice();
  TableGpu(*table).UseCompletions(&kCudaDeviceMemory, device);
  if (table->num_columns() > kMaxGpuColumns) {
    return Fail("the GPU gather handles at most " + std::to_string(kMaxGpuColumns) +
                " columns; this table has " + std::to_string(table->num_columns()));
  }
  if (!table->SelectsOnHost(request)) {
    // Prioritized finds every priority 0: an update still on the stream
    // may change that (staged_update.h), so let the stream apply it first.
    if (TableGpu(*table).WaitsForStagedUpdates(request)) {
      Count(HostWork::kSync);
      const cudaError_t synced = cudaStreamSynchronize(stream);
      if (synced != cudaSuccess) return Fail(CudaError("waiting for priority updates", synced));
    }
    return SampleOnDevice(stream, scratch, device, seed.typed_data(), table, request, width,
                          pad_left, out);
  }

  // TopK, Recent and constrained samples (cut="full", replace=False,
  // max_times_sampled): select on the host, gather on the GPU.
  uint32_t host_seed[2];
  Count(HostWork::kCopy);
  Count(HostWork::kSync);
  cudaError_t error = cudaMemcpyAsync(host_seed, seed.typed_data(), sizeof(host_seed),
                                      cudaMemcpyDeviceToHost, stream);
  if (error == cudaSuccess) error = cudaStreamSynchronize(stream);
  if (error != cudaSuccess) return Fail(CudaError("copying the seed", error));

  std::vector<Draw> draws(static_cast<size_t>(batch));
  DeviceTicket ticket(table, table->Select(request, host_seed, draws.data()), device, stream);

  // The draws go to pinned memory the table keeps for this ticket, which
  // the gather reads in place: no copy from this pageable vector, whose
  // life CUDA would not extend past this call.
  const auto [staged, staged_device] =
      TableGpu(*table).StagingFor(ticket.id(), batch * sizeof(Draw));
  if (staged == nullptr) return Fail("could not allocate pinned host memory for the draws");
  std::memcpy(staged, draws.data(), batch * sizeof(Draw));
  Count(HostWork::kLaunch);
  GatherParams params = PlanGather(*table, static_cast<const Draw*>(staged_device), batch, width,
                                   pad_left, out, table->device_arena());
  params.completion = ticket.completion();
  error = LaunchGather(params, stream);
  if (error != cudaSuccess) return Fail(CudaError("launching the gather", error));
  ticket.HandToDevice();
  return ffi::Error::Success();
}

// The sample handlers in their two registrations (gearjax/_ffi.py): staged
// (an instantiate stage makes the call site once, execute reads it) and per
// call (the site made from the attributes on every call).
ffi::ErrorOr<std::unique_ptr<SampleStateCuda>> SampleInstantiate(SampleAttrs attrs) {
  return Instantiated<SampleStateCuda>(MakeSampleSite(attrs));
}

ffi::Error SampleCudaImpl(cudaStream_t stream, ffi::ScratchAllocator scratch, Order,
                                 ffi::Buffer<ffi::U32> seed, ffi::RemainingRets rets,
                                 SampleAttrs attrs) {
  return Sample(stream, scratch, seed, rets, /*first=*/1, MakeSampleSite(attrs));
}

ffi::Error SampleStagedImpl(cudaStream_t stream, ffi::ScratchAllocator scratch,
                                   SampleStateCuda* state, Order, ffi::Buffer<ffi::U32> seed,
                                   ffi::RemainingRets rets) {
  return Sample(stream, scratch, seed, rets, /*first=*/1, state->site);
}

// Enqueues a copy of the buffer's bytes into `out` (sized first: it must not
// move while the copy is in flight); the caller synchronises.
bool CopyToHost(const ffi::AnyBuffer& buffer, std::vector<uint8_t>& out, cudaStream_t stream) {
  out.resize(buffer.size_bytes());
  return cudaMemcpyAsync(out.data(), buffer.untyped_data(), out.size(), cudaMemcpyDeviceToHost,
                         stream) == cudaSuccess;
}

// The host functions of a staged priority update (core/gpu/staged_update.h). They
// run as stream callbacks: no CUDA calls, and a table or buffer released
// there is released later (memory.h).
void CUDART_CB ApplyStagedUpdate(void* data) {
  StreamCallbackScope no_cuda_calls_here;
  static_cast<StagedUpdate*>(data)->Apply();
}

void CUDART_CB RecycleStagedUpdate(void* data) {
  StreamCallbackScope no_cuda_calls_here;
  StagedUpdate::Recycle(static_cast<StagedUpdate*>(data));
}

// One kernel applies the update on the GPU (core/gpu/update_block.h) and reports
// its ticket through the completion ring: nothing else on the stream.
ffi::Error UpdateOnDevice(cudaStream_t stream, int device, const std::shared_ptr<Table>& table,
                          uint64_t ticket, GpuUpdate& update, const MirrorCopies& copies,
                          const ffi::AnyBuffer& keys,
                          KeyFormat key_format, const ffi::AnyBuffer& priorities,
                          PriorityFormat priority_format, int32_t* updated) {
  // Every return before the launch succeeds gives back the deferred leaves
  // handed to the kernel (UpdateTicket).
  UpdateTicket held(table, ticket, device, stream);
  if (const ffi::Error copied = CopyMirrors(*table, copies, stream); copied.failure()) {
    return copied;  // (first, as in SampleOnDevice)
  }
  update.completion = held.completion();
  update.keys = keys.untyped_data();
  update.key_format = key_format;
  update.priorities = priorities.untyped_data();
  update.priority_format = priority_format;
  update.n = static_cast<int64_t>(keys.element_count());
  update.updated = updated;
  Count(HostWork::kLaunch);
  const cudaError_t error = LaunchPriorityUpdate(update, stream);
  if (error != cudaSuccess) return Fail(CudaError("launching the priority update", error));
  held.HandToDevice();
  return ffi::Error::Success();
}

// Enqueues the update without waiting for the stream: on the GPU
// (UpdateOnDevice) where the table allows it (TableGpu::BeginUpdate), else
// staged (see staged_update.h): copies of keys and priorities into pinned
// host memory, Apply, the count's copy into `updated`, Recycle. Types and
// sizes fail here, values later.
ffi::Error UpdatePriorities(cudaStream_t stream, const ffi::AnyBuffer& keys,
                            const ffi::AnyBuffer& priorities,
                            ffi::Result<ffi::Buffer<ffi::S32>>& updated, const TableSite& site) {
  std::shared_ptr<Table> table = ForThisGpu(site.Resolve());
  KeyFormat key_format;
  PriorityFormat priority_format;
  if (!KeyFormatOf(keys.element_type(), &key_format)) {
    return Fail("keys must be int32, uint32 or int64");
  }
  if (!PriorityFormatOf(priorities.element_type(), &priority_format)) {
    return Fail("priorities must be float32 or float64");
  }
  if (keys.element_count() != priorities.element_count()) {
    return Fail("keys and priorities differ in size");
  }
  const int64_t n = static_cast<int64_t>(keys.element_count());
  const int device = CurrentDevice();
  TableGpu(*table).UseCompletions(&kCudaDeviceMemory, device);
  GpuUpdate on_device;
  MirrorCopies copies;
  // An update needing more shared memory than this GPU allows is staged.
  if (const uint64_t ticket = TableGpu(*table).BeginUpdate(stream, n, &on_device, &copies,
                                                           PriorityUpdateSharedLimit())) {
    return UpdateOnDevice(stream, device, table, ticket, on_device, copies, keys, key_format,
                          priorities,
                          priority_format, updated->typed_data());
  }
  StagedUpdate* update = StagedUpdate::Take(std::move(table), key_format, priority_format, n);
  if (!update->pinned()) {
    StagedUpdate::Recycle(update);
    return Fail("could not allocate pinned host memory for a priority update");
  }
  cudaError_t error = cudaSuccess;
  // Two copies to the host (when there are keys), Apply, the count's copy
  // back, Recycle.
  Count(HostWork::kCopy, n > 0 ? 3 : 1);
  Count(HostWork::kHostFunction, 2);
  if (n > 0) {
    error = cudaMemcpyAsync(update->keys(), keys.untyped_data(), keys.size_bytes(),
                            cudaMemcpyDeviceToHost, stream);
    if (error == cudaSuccess) {
      error = cudaMemcpyAsync(update->priorities(), priorities.untyped_data(),
                              priorities.size_bytes(), cudaMemcpyDeviceToHost, stream);
    }
  }
  if (error == cudaSuccess) error = cudaLaunchHostFunc(stream, ApplyStagedUpdate, update);
  if (error == cudaSuccess) {
    error = cudaMemcpyAsync(updated->typed_data(), update->count(), sizeof(int32_t),
                            cudaMemcpyHostToDevice, stream);
  }
  if (error == cudaSuccess) error = cudaLaunchHostFunc(stream, RecycleStagedUpdate, update);
  if (error != cudaSuccess) {
    // Whatever was enqueued may still use the buffer: let it finish first
    // (if even that fails, the buffer is left to the stream, never reused).
    if (cudaStreamSynchronize(stream) == cudaSuccess) StagedUpdate::Recycle(update);
    return Fail(CudaError("enqueueing the priority update", error));
  }
  return ffi::Error::Success();
}

ffi::ErrorOr<std::unique_ptr<UpdateStateCuda>> UpdateInstantiate(int64_t table_handle) {
  return Instantiated<UpdateStateCuda>(MakeTableSite(table_handle));
}

ffi::Error UpdatePrioritiesCudaImpl(cudaStream_t stream, Order, ffi::AnyBuffer keys,
                                    ffi::AnyBuffer priorities, ffi::Result<Order>,
                                    ffi::Result<ffi::Buffer<ffi::S32>> updated,
                                    int64_t table_handle) {
  return UpdatePriorities(stream, keys, priorities, updated, MakeTableSite(table_handle));
}

ffi::Error UpdatePrioritiesStagedImpl(cudaStream_t stream, UpdateStateCuda* state, Order,
                                      ffi::AnyBuffer keys, ffi::AnyBuffer priorities,
                                      ffi::Result<Order>,
                                      ffi::Result<ffi::Buffer<ffi::S32>> updated) {
  return UpdatePriorities(stream, keys, priorities, updated, state->site);
}

// update_priorities(..., steps=): the operands come to the host (one
// synchronisation), the table applies them there, and the count goes back
// (a second): step tables select on the host anyway.
ffi::Error UpdateStepPrioritiesCudaImpl(cudaStream_t stream, Order, ffi::AnyBuffer keys,
                                        ffi::AnyBuffer steps, ffi::AnyBuffer priorities,
                                        ffi::Result<Order>,
                                        ffi::Result<ffi::Buffer<ffi::S32>> updated,
                                        int64_t table_handle) {
  std::shared_ptr<Table> table = LookUpTableForThisGpu(table_handle);
  std::vector<uint8_t> raw_keys, raw_steps, raw_priorities;
  Count(HostWork::kCopy, 3);
  if (!CopyToHost(keys, raw_keys, stream) || !CopyToHost(steps, raw_steps, stream) ||
      !CopyToHost(priorities, raw_priorities, stream)) {
    return Fail(CudaError("copying a step priority update to the host", cudaGetLastError()));
  }
  Count(HostWork::kSync);
  cudaError_t error = cudaStreamSynchronize(stream);
  if (error != cudaSuccess) return Fail(CudaError("copying a step priority update", error));
  const int32_t count = UpdateStepPrioritiesOnHost(
      *table, keys.element_type(), raw_keys.data(), keys.element_count(), steps.element_type(),
      raw_steps.data(), steps.element_count(), priorities.element_type(),
      raw_priorities.data(), priorities.element_count());
  Count(HostWork::kCopy);
  Count(HostWork::kSync);
  error = cudaMemcpyAsync(updated->typed_data(), &count, sizeof(count), cudaMemcpyHostToDevice,
                          stream);
  if (error == cudaSuccess) error = cudaStreamSynchronize(stream);  // `count` lives here
  if (error != cudaSuccess) return Fail(CudaError("writing a step update's count", error));
  return ffi::Error::Success();
}

// Inserts N trajectories given as device arrays [N, T, *step] per column (see
// the file comment and InsertBatchRows).
ffi::Error InsertBatchCudaImpl(cudaStream_t stream, Order, ffi::AnyBuffer lengths,
                               ffi::AnyBuffer priorities, ffi::RemainingArgs columns,
                               ffi::Result<Order>, ffi::Result<ffi::Buffer<ffi::S64>> keys,
                               int64_t table_handle, int64_t rows, int64_t steps) {
  std::shared_ptr<Table> table = LookUpTableForThisGpu(table_handle);
  uint8_t* arena = const_cast<uint8_t*>(table->device_arena());  // reachable: looked up
  std::vector<uint8_t> raw_lengths, raw_priorities;
  if (!CopyToHost(lengths, raw_lengths, stream) ||
      !CopyToHost(priorities, raw_priorities, stream)) {
    cudaStreamSynchronize(stream);  // let any enqueued copy finish before the vectors go
    return Fail("copying lengths and priorities to the host failed");
  }
  if (cudaStreamSynchronize(stream) != cudaSuccess) return Fail("stream synchronisation failed");
  std::vector<int64_t> length_values;
  std::vector<double> priority_values;
  if (!ReadKeys(lengths.element_type(), raw_lengths.data(), lengths.element_count(),
                length_values)) {
    return Fail("lengths must be int32 or int64");
  }
  if (!ReadPriorities(priorities.element_type(), raw_priorities.data(),
                      priorities.element_count(), priority_values)) {
    return Fail("priorities must be float32 or float64");
  }
  std::vector<int64_t> host_keys(std::max<int64_t>(rows, 0));
  InsertBatchRows(
      *table, rows, steps, columns, keys->element_count(), length_values, priority_values,
      [&](const std::vector<ColumnCopy>& copies) {
        // Every column of every row of the chunk, then one synchronisation:
        // published only when the bytes are there (and, on error, returned
        // to the free list only when nothing is still copying into them).
        cudaError_t error = cudaSuccess;
        for (size_t c = 0; c < copies.size() && error == cudaSuccess; ++c) {
          error = cudaMemcpyAsync(arena + copies[c].dst_offset, copies[c].src, copies[c].bytes,
                                  cudaMemcpyDefault, stream);
        }
        const cudaError_t synced = cudaStreamSynchronize(stream);
        if (error == cudaSuccess) error = synced;
        if (error != cudaSuccess) throw std::runtime_error(CudaError("copying a trajectory", error));
      },
      host_keys.data());
  cudaError_t error = cudaMemcpyAsync(keys->typed_data(), host_keys.data(),
                                      rows * sizeof(int64_t), cudaMemcpyHostToDevice, stream);
  // host_keys lives on this stack: wait for the copy, and fail if it did
  // not complete (the keys would be unwritten).
  const cudaError_t synced = cudaStreamSynchronize(stream);
  if (error == cudaSuccess) error = synced;
  return error == cudaSuccess ? ffi::Error::Success() : Fail(CudaError("copying the keys", error));
}

KernelCheck kernel_check;

}  // namespace

std::string KernelImageProblem(int device) {
  cudaError_t error = GatherKernelRunsHere();
  if (error == cudaSuccess) error = SelectKernelRunsHere();
  if (error == cudaSuccess) error = FusedSampleKernelRunsHere();
  if (error == cudaSuccess) error = PriorityUpdateKernelRunsHere();
  if (error == cudaSuccess) error = MirrorKernelRunsHere();
  if (error == cudaSuccess) return "";
  cudaGetLastError();  // the probe's own error is not sticky: clear it
  if (error != cudaErrorNoKernelImageForDevice && error != cudaErrorInvalidDeviceFunction) {
    // Not the build's architectures: memory, a sticky error, a driver
    // problem. Said as itself (KernelCheck asks again next call).
    return std::string("checking gearjax's CUDA kernels on GPU ") + std::to_string(device) +
           " failed: " + cudaGetErrorName(error) + " (" + cudaGetErrorString(error) + ")";
  }
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  return std::string("gearjax's CUDA kernels cannot run on GPU ") + std::to_string(device) +
         " (compute capability " + std::to_string(major) + "." + std::to_string(minor) +
         "): this build has kernels for the architectures " + kCudaArchitecturesBuilt +
         " only (" + cudaGetErrorString(error) + "); reinstall gearjax with "
         "GEARJAX_CUDA_ARCHITECTURES=" + std::to_string(major) + std::to_string(minor) +
         " set (docs: Installation)";
}

std::string KernelImageProblemOn(int device) {
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess || cudaSetDevice(device) != cudaSuccess) {
    cudaGetLastError();
    return "no CUDA device " + std::to_string(device);
  }
  std::string problem = KernelImageProblem(device);
  cudaSetDevice(previous);
  return problem;
}

std::shared_ptr<Table> LookUpTableForThisGpu(int64_t handle) {
  return ForThisGpu(LookUpTable(handle));
}

std::shared_ptr<Table> ForThisGpu(std::shared_ptr<Table> table) {
  TableGpu(*table).CheckReachable(&kCudaMappedAllocator, &kCudaDeviceMemory);
  const int device = CurrentDevice();
  TableGpu(*table).CheckDevice(device);
  // A kernel without an image for this GPU launches nothing: the handler
  // must fail rather than hand XLA's buffers back unwritten.
  const std::string problem = kernel_check.Check(device, KernelImageProblem);
  if (!problem.empty()) throw InvalidArgument(problem);
  return table;
}

namespace {

XLA_FFI_DEFINE_HANDLER_SYMBOL(SampleCuda, Guarded<&SampleCudaImpl>::Run,
                              BindSampleAttrs(ffi::Ffi::Bind()
                                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                                  .Ctx<ffi::ScratchAllocator>()
                                                  .Arg<Order>()
                                                  .Arg<ffi::Buffer<ffi::U32>>()
                                                  .RemainingRets()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(SampleInstantiateCuda, SampleInstantiate,
                              BindSampleAttrs(ffi::Ffi::BindInstantiate()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(SampleExecuteCuda, Guarded<&SampleStagedImpl>::Run,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<ffi::ScratchAllocator>()
                                  .Ctx<ffi::State<SampleStateCuda>>()
                                  .Arg<Order>()
                                  .Arg<ffi::Buffer<ffi::U32>>()
                                  .RemainingRets());

XLA_FFI_DEFINE_HANDLER_SYMBOL(UpdatePrioritiesCuda, Guarded<&UpdatePrioritiesCudaImpl>::Run,
                              BindUpdatePriorities(ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(UpdateInstantiateCuda, UpdateInstantiate,
                              BindUpdateAttrs(ffi::Ffi::BindInstantiate()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(UpdateExecuteCuda, Guarded<&UpdatePrioritiesStagedImpl>::Run,
                              BindUpdateOperands(ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<ffi::State<UpdateStateCuda>>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(InsertBatchCuda, Guarded<&InsertBatchCudaImpl>::Run,
                              BindInsertBatch(ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(UpdateStepPrioritiesCuda,
                              Guarded<&UpdateStepPrioritiesCudaImpl>::Run,
                              BindUpdateStepPriorities(ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()));

}  // namespace

PlatformTargets CudaTargets() {
  PlatformTargets targets{
      {{"gearjax_sample", SampleCuda, SampleInstantiateCuda, SampleExecuteCuda},
       {"gearjax_update_priorities", UpdatePrioritiesCuda, UpdateInstantiateCuda,
        UpdateExecuteCuda}},
      {{"gearjax_insert_batch", InsertBatchCuda},
       {"gearjax_update_step_priorities", UpdateStepPrioritiesCuda}}};
  for (const FfiTarget& t : CudaShardTargets()) targets.plain.push_back(t);
  return targets;
}

}  // namespace gearjax
