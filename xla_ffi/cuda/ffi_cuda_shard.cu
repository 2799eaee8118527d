// CUDA FFI handlers of a ShardedTable's xla exchange (gearjax/sharded/
// exchange.py, xla_ffi/core/sharding/sharding.h), for programs whose collectives run
// over GPUs (NCCL).
//
// The arithmetic of every step (summaries, best lists, ranking, the shard
// draw, the owner's draws, key translation) is the core's and runs on the
// host: its inputs are a few words per shard or per row. The steps other than
// the owner's gather are written once (shard_steps.h) and bound here to
// DeviceMemory, which copies each operand from the GPU (waiting for it) and
// the results back (waiting once for them all).
// Only the owner's windows move in bulk, and they are gathered on the GPU by
// the sample kernels' gather (cuda/gather.cu), zero-copy from a mapped host
// arena or from a device arena, straight into each requester's block of XLA's
// output; the draws' tickets are returned by a host function once the stream
// has passed the gathers (cuda/tickets.h), as in the sample handlers.
//
// Not run on a GPU yet: compiled here with nvcc; the logic is the core's,
// tested on the CPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/gpu/gather_plan.h"
#include "core/sharding/sharding.h"
#include "cuda/ffi_cuda.h"
#include "cuda/gather.cuh"
#include "cuda/tickets.h"
#include "ffi/call_site.h"
#include "ffi/ffi_common.h"
#include "ffi/ffi_handlers.h"
#include "ffi/shard_steps.h"

namespace ffi = xla::ffi;

namespace gearjax {
namespace {

std::string CudaFailure(const char* what, cudaError_t error) {
  return std::string(what) + ": " + cudaGetErrorString(error);
}

// shard_steps.h's Memory on a GPU: each operand copied to the host (waiting
// for the copy), results staged on the host and copied to the GPU by
// Publish(), which waits once for them all (the host values live in this
// object, which the step holds until it returns). Errors throw, as the
// steps' own checks do.
class DeviceMemory {
 public:
  explicit DeviceMemory(cudaStream_t stream) : stream_(stream) {}

  std::shared_ptr<gearjax::Table> Table(int64_t handle) const {
    return LookUpTableForThisGpu(handle);
  }

  template <typename T>
  const T* Read(const T* operand, size_t count) {
    T* host = Hold<T>(count);
    Check("copying to the host", count == 0 ? cudaSuccess
                                            : cudaMemcpyAsync(host, operand, count * sizeof(T),
                                                              cudaMemcpyDeviceToHost, stream_));
    Check("copying to the host", cudaStreamSynchronize(stream_));
    return host;
  }

  template <typename T>
  T* Write(T* result, size_t count) {
    T* host = Hold<T>(count);
    staged_.push_back({result, host, count * sizeof(T)});
    return host;
  }

  void Publish() {
    for (const Staged& s : staged_) {
      if (s.bytes == 0) continue;
      Check("copying to the GPU",
            cudaMemcpyAsync(s.device, s.host, s.bytes, cudaMemcpyHostToDevice, stream_));
    }
    // The host values are released when the step returns: wait for them.
    Check("copying to the GPU", cudaStreamSynchronize(stream_));
    staged_.clear();
  }

  void Copy(void* result, const void* operand, size_t bytes) {
    Check("copying", cudaMemcpyAsync(result, operand, bytes, cudaMemcpyDeviceToDevice, stream_));
  }

  void Zero(void* result, size_t bytes) {
    Check("zeroing", cudaMemsetAsync(result, 0, bytes, stream_));
  }

 private:
  struct Staged {
    void* device;
    const void* host;
    size_t bytes;
  };

  static void Check(const char* what, cudaError_t error) {
    if (error != cudaSuccess) throw std::runtime_error(CudaFailure(what, error));
  }

  // Host memory for `count` values of T, aligned as operator new[] aligns.
  template <typename T>
  T* Hold(size_t count) {
    held_.push_back(std::make_unique<unsigned char[]>(std::max<size_t>(1, count * sizeof(T))));
    return reinterpret_cast<T*>(held_.back().get());
  }

  cudaStream_t stream_;
  std::vector<std::unique_ptr<unsigned char[]>> held_;
  std::vector<Staged> staged_;
};

// The owner's part: draws on the host (ServeDraws), then one GPU gather per
// requester into its block of the outputs.
ffi::Error ShardServeCudaImpl(cudaStream_t stream, ffi::ScratchAllocator scratch, Order,
                              ffi::Buffer<ffi::U32> seeds, ffi::Buffer<ffi::S32> counts,
                              ffi::Buffer<ffi::U32> summaries, ffi::RemainingRets rets,
                              int64_t table_handle, int64_t block, int64_t strategy,
                              double alpha, int64_t window, int64_t pad_left, int64_t shard,
                              int64_t shard_shift, int64_t ragged) {
  std::shared_ptr<Table> table = LookUpTableForThisGpu(table_handle);
  const uint8_t* arena = table->device_arena();  // reachable: LookUpTableForThisGpu checked
  const shard_steps::ServeShape shape = shard_steps::CheckServe(
      seeds.element_count(), counts.element_count(), summaries.element_count(), block,
      shard_shift);
  const int64_t shards = shape.shards, rows = shape.rows;
  const SampleCall call = BindSampleCall(
      *table, 2, rets, /*first=*/1,
      {table_handle, rows, strategy, alpha, ServeRequestCount(strategy), window, pad_left,
       static_cast<int64_t>(Cut::kStart), /*replace=*/1},
      SampleResults::kDevice);
  DeviceMemory memory(stream);
  const uint32_t* seed = memory.Read(seeds.typed_data(), static_cast<size_t>(2 * shards));
  const int32_t* asked = memory.Read(counts.typed_data(), static_cast<size_t>(shards));
  const auto* s = memory.Read(reinterpret_cast<const ShardSummary*>(summaries.typed_data()),
                              static_cast<size_t>(shards));

  auto pending = std::make_unique<PendingTickets>();
  pending->table = table;
  pending->draws.resize(static_cast<size_t>(rows));
  pending->tickets = ServeDraws(*table, call.request, shard, static_cast<int>(shard_shift),
                                s, shards, seed, asked, block,
                                pending->draws.data());
  StreamTickets tickets(std::move(pending), stream);
  const std::vector<Draw>& draws = tickets.pending().draws;

  const std::optional<void*> device_draws = scratch.Allocate(rows * sizeof(Draw), 16);
  if (!device_draws.has_value()) return Fail("could not allocate scratch memory for the draws");
  // From pageable memory: the host draws live until the host function
  // after the gathers (StreamTickets), so the copy cannot outlive them.
  cudaError_t error = cudaMemcpyAsync(*device_draws, draws.data(), rows * sizeof(Draw),
                                      cudaMemcpyHostToDevice, stream);
  for (int64_t j = 0; j < shards && error == cudaSuccess; ++j) {
    if (asked[j] == 0) continue;  // the requester reads nothing of this block
    SampleOutputs out = call.out;  // requester j's block
    out.keys += j * block;
    out.start += j * block;
    out.probability += j * block;
    out.table_size += j * block;
    out.valid += j * block;
    for (int c = 0; c < table->num_columns(); ++c) {
      out.columns[c] += j * block * call.width * table->step_bytes(c);
    }
    error = LaunchGather(PlanGather(*table, static_cast<const Draw*>(*device_draws) + j * block,
                                    asked[j], call.width, pad_left != 0, out, arena),
                         stream);
  }
  if (error == cudaSuccess) error = tickets.HandToStream();
  if (error != cudaSuccess) return Fail(CudaFailure("launching the gather", error));
  int64_t row_bytes = 0, asked_rows = 0;
  for (int c = 0; c < table->num_columns(); ++c) row_bytes += call.width * table->step_bytes(c);
  for (int64_t j = 0; j < shards; ++j) asked_rows += asked[j];
  // A ragged all-to-all sends the rows asked; a blocked one, whole blocks.
  table->exchange_counters().Record(ragged ? 0 : block, asked_rows,
                                    ragged ? asked_rows : rows, row_bytes);
  return ffi::Error::Success();
}

// The steps of shard_steps.h on the stream.
template <auto Step>
constexpr auto kOnGpu = &OnPlatform<DeviceMemory, Step>::template RunWith<cudaStream_t>;

XLA_FFI_DEFINE_HANDLER_SYMBOL(ZerosCuda, Guarded<kOnGpu<&shard_steps::Zeros<DeviceMemory>>>::Run,
                              BindZeros(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(ShardTotalsCuda,
                              Guarded<kOnGpu<&shard_steps::Totals<DeviceMemory>>>::Run,
                              BindShardTotals(ffi::Ffi::Bind()
                                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(ShardTopsCuda, Guarded<kOnGpu<&shard_steps::Tops<DeviceMemory>>>::Run,
                              BindShardTops(ffi::Ffi::Bind()
                                                .Ctx<ffi::PlatformStream<cudaStream_t>>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(ShardRankCuda, Guarded<kOnGpu<&shard_steps::Rank<DeviceMemory>>>::Run,
                              BindShardRank(ffi::Ffi::Bind()
                                                .Ctx<ffi::PlatformStream<cudaStream_t>>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(ShardPlanCuda, Guarded<kOnGpu<&shard_steps::Plan<DeviceMemory>>>::Run,
                              BindShardPlan(ffi::Ffi::Bind()
                                                .Ctx<ffi::PlatformStream<cudaStream_t>>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(ShardServeCuda, Guarded<&ShardServeCudaImpl>::Run,
                              BindShardServe(ffi::Ffi::Bind()
                                                 .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                                 .Ctx<ffi::ScratchAllocator>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(ShardKeysCuda, Guarded<kOnGpu<&shard_steps::Keys<DeviceMemory>>>::Run,
                              BindShardKeys(ffi::Ffi::Bind()
                                                .Ctx<ffi::PlatformStream<cudaStream_t>>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Int64FromWordsCuda, Guarded<kOnGpu<&shard_steps::Int64FromWords<DeviceMemory>>>::Run,
    BindInt64FromWords(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()));

}  // namespace

std::vector<FfiTarget> CudaShardTargets() {
  return {{"gearjax_shard_totals", ShardTotalsCuda},
          {"gearjax_shard_plan", ShardPlanCuda},
          {"gearjax_shard_tops", ShardTopsCuda},
          {"gearjax_shard_rank", ShardRankCuda},
          {"gearjax_shard_serve", ShardServeCuda},
          {"gearjax_shard_keys", ShardKeysCuda},
          {"gearjax_int64_from_words", Int64FromWordsCuda},
          {"gearjax_zeros", ZerosCuda}};
}

}  // namespace gearjax
