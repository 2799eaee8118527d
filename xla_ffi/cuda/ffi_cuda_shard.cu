// CUDA FFI handlers of a ShardedTable's xla exchange (gearjax/sharded/
// exchange.py, xla_ffi/core/sharding.h): the same steps as the CPU handlers
// (ffi_cpu.cc), for programs whose collectives run over GPUs (NCCL).
//
// The arithmetic of every step (summaries, best lists, ranking, the shard
// draw, the owner's draws, key translation) is the core's and runs on the
// host: its inputs are a few words per shard or per row, copied from the
// device with one stream synchronisation, and its results are copied back.
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

#include "call_site.h"
#include "core/gather_plan.h"
#include "core/sharding.h"
#include "cuda/ffi_cuda.h"
#include "cuda/gather.cuh"
#include "cuda/tickets.h"
#include "ffi_common.h"

namespace ffi = xla::ffi;

namespace gearjax {
namespace {

std::string CudaFailure(const char* what, cudaError_t error) {
  return std::string(what) + ": " + cudaGetErrorString(error);
}

// Copies device buffers to host vectors and waits for them.
template <typename T>
std::vector<T> ToHost(const void* device, size_t count, cudaStream_t stream) {
  std::vector<T> host(count);
  cudaError_t error = cudaSuccess;
  if (count > 0) {
    error = cudaMemcpyAsync(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost,
                            stream);
  }
  const cudaError_t synced = cudaStreamSynchronize(stream);
  if (error == cudaSuccess) error = synced;
  if (error != cudaSuccess) throw std::runtime_error(CudaFailure("copying to the host", error));
  return host;
}

// Copies host bytes into a device buffer and waits (the host bytes may be
// released when this returns).
void ToDevice(void* device, const void* host, size_t bytes, cudaStream_t stream) {
  cudaError_t error = cudaSuccess;
  if (bytes > 0) error = cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream);
  const cudaError_t synced = cudaStreamSynchronize(stream);
  if (error == cudaSuccess) error = synced;
  if (error != cudaSuccess) throw std::runtime_error(CudaFailure("copying to the GPU", error));
}

ffi::Error ShardTotalsCudaImpl(cudaStream_t stream, Order, ffi::Result<Order>,
                               ffi::Result<ffi::Buffer<ffi::U32>> summary, int64_t table_handle,
                               int64_t strategy, double alpha, int64_t shard) {
  std::shared_ptr<Table> table = LookUpTableForThisGpu(table_handle);
  if (summary->element_count() != kSummaryWords) return Fail("the summary has the wrong size");
  const ShardSummary s = Summarize(shard, table->Totals(ShardRequest(strategy, alpha)));
  ToDevice(summary->typed_data(), &s, sizeof(s), stream);
  return ffi::Error::Success();
}

ffi::Error ShardTopsCudaImpl(cudaStream_t stream, Order, ffi::Result<Order>,
                             ffi::Result<ffi::Buffer<ffi::U32>> summary,
                             ffi::Result<ffi::Buffer<ffi::U32>> entries, int64_t table_handle,
                             int64_t strategy, int64_t count, int64_t shard) {
  std::shared_ptr<Table> table = LookUpTableForThisGpu(table_handle);
  if (summary->element_count() != kSummaryWords) return Fail("the summary has the wrong size");
  const SampleRequest request =
      TopsRequest(strategy, count, static_cast<int64_t>(entries->element_count()),
                  table->spec().capacity);
  const int64_t per_shard = static_cast<int64_t>(entries->element_count()) / kEntryWords;
  std::vector<TopEntry> list(static_cast<size_t>(per_shard), TopEntry{0.0, -1});
  const ShardSummary s = Summarize(shard, table->Tops(request, list.data()));
  ToDevice(summary->typed_data(), &s, sizeof(s), stream);
  ToDevice(entries->typed_data(), list.data(), list.size() * sizeof(TopEntry), stream);
  return ffi::Error::Success();
}

ffi::Error ShardRankCudaImpl(cudaStream_t stream, ffi::Buffer<ffi::U32> summaries,
                             ffi::Buffer<ffi::U32> entries,
                             ffi::Result<ffi::Buffer<ffi::U32>> ranked, int64_t strategy,
                             int64_t count) {
  if (ranked->element_count() != summaries.element_count()) return Fail("sizes differ");
  const RankShape shape = RankShapeOf(static_cast<int64_t>(summaries.element_count()),
                                      static_cast<int64_t>(entries.element_count()));
  const int64_t shards = shape.shards, per_shard = shape.per_shard;
  const SampleRequest request = ShardRequest(strategy, 0.0, count);
  std::vector<ShardSummary> s =
      ToHost<ShardSummary>(summaries.typed_data(), static_cast<size_t>(shards), stream);
  const std::vector<TopEntry> lists = ToHost<TopEntry>(
      entries.typed_data(), static_cast<size_t>(shards * per_shard), stream);
  RankShards(request.strategy, count, lists.data(), per_shard, s.data(), shards);
  ToDevice(ranked->typed_data(), s.data(), s.size() * sizeof(ShardSummary), stream);
  return ffi::Error::Success();
}

ffi::Error ShardPlanCudaImpl(cudaStream_t stream, ffi::Buffer<ffi::U32> seeds,
                             ffi::Buffer<ffi::U32> summaries,
                             ffi::Result<ffi::Buffer<ffi::S32>> shard_of_row,
                             ffi::Result<ffi::Buffer<ffi::S32>> rank_in_shard,
                             ffi::Result<ffi::Buffer<ffi::S32>> counts) {
  const int64_t requesters = static_cast<int64_t>(seeds.element_count()) / 2;
  if (requesters < 1 || static_cast<int64_t>(seeds.element_count()) != 2 * requesters) {
    return Fail("expected two seed words per requester");
  }
  const int64_t shards = static_cast<int64_t>(counts->element_count()) / requesters;
  if (shards < 1 || shards * requesters != static_cast<int64_t>(counts->element_count()) ||
      shard_of_row->element_count() % requesters != 0 ||
      rank_in_shard->element_count() != shard_of_row->element_count() ||
      static_cast<int64_t>(summaries.element_count()) != shards * kSummaryWords) {
    return Fail("the plan's inputs and results do not match");
  }
  const int64_t batch = static_cast<int64_t>(shard_of_row->element_count()) / requesters;
  const std::vector<uint32_t> seed = ToHost<uint32_t>(seeds.typed_data(),
                                                      static_cast<size_t>(2 * requesters), stream);
  const std::vector<ShardSummary> s =
      ToHost<ShardSummary>(summaries.typed_data(), static_cast<size_t>(shards), stream);
  std::vector<int32_t> rows(static_cast<size_t>(requesters * batch));
  std::vector<int32_t> ranks(rows.size());
  std::vector<int32_t> per_shard(static_cast<size_t>(requesters * shards));
  for (int64_t j = 0; j < requesters; ++j) {
    PlanShards(s.data(), shards, seed.data() + 2 * j, batch, rows.data() + j * batch,
               ranks.data() + j * batch, per_shard.data() + j * shards);
  }
  ToDevice(shard_of_row->typed_data(), rows.data(), rows.size() * sizeof(int32_t), stream);
  ToDevice(rank_in_shard->typed_data(), ranks.data(), ranks.size() * sizeof(int32_t), stream);
  ToDevice(counts->typed_data(), per_shard.data(), per_shard.size() * sizeof(int32_t), stream);
  return ffi::Error::Success();
}

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
  const int64_t shards = static_cast<int64_t>(counts.element_count());
  if (shards < 1 || static_cast<int64_t>(seeds.element_count()) != 2 * shards ||
      static_cast<int64_t>(summaries.element_count()) != shards * kSummaryWords) {
    return Fail("expected two seed words and one summary per requester");
  }
  if (block < 1 || shards > kMaxBatch / block) return Fail("block size out of range");
  if (shard_shift < 1 || shard_shift > 62) return Fail("shard_shift out of range");
  const int64_t rows = shards * block;
  const SampleCall call = BindSampleCall(
      *table, 2, rets, /*first=*/1,
      {table_handle, rows, strategy, alpha, ServeRequestCount(strategy), window, pad_left,
       static_cast<int64_t>(Cut::kStart), /*replace=*/1},
      /*host_results=*/false);
  const std::vector<uint32_t> seed =
      ToHost<uint32_t>(seeds.typed_data(), static_cast<size_t>(2 * shards), stream);
  const std::vector<int32_t> asked =
      ToHost<int32_t>(counts.typed_data(), static_cast<size_t>(shards), stream);
  const std::vector<ShardSummary> s =
      ToHost<ShardSummary>(summaries.typed_data(), static_cast<size_t>(shards), stream);

  auto pending = std::make_unique<PendingTickets>();
  pending->table = table;
  pending->draws.resize(static_cast<size_t>(rows));
  pending->tickets = ServeDraws(*table, call.request, shard, static_cast<int>(shard_shift),
                                s.data(), shards, seed.data(), asked.data(), block,
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
  for (int32_t n : asked) asked_rows += n;
  // A ragged all-to-all sends the rows asked; a blocked one, whole blocks.
  table->exchange_counters().Record(ragged ? 0 : block, asked_rows,
                                    ragged ? asked_rows : rows, row_bytes);
  return ffi::Error::Success();
}

ffi::Error ShardKeysCudaImpl(cudaStream_t stream, ffi::Buffer<ffi::S64> keys,
                             ffi::Result<ffi::Buffer<ffi::S64>> out, int64_t shard,
                             int64_t shard_shift, int64_t to_local) {
  if (shard_shift < 1 || shard_shift > 62 || shard < 0 ||
      shard >= (int64_t{1} << (63 - shard_shift))) {
    return Fail("shard or shard_shift out of range");
  }
  if (out->element_count() != keys.element_count()) return Fail("keys differ in size");
  std::vector<int64_t> values = ToHost<int64_t>(keys.typed_data(), keys.element_count(), stream);
  TranslateKeys(values.data(), values.data(), static_cast<int64_t>(values.size()), shard,
                static_cast<int>(shard_shift), to_local != 0);
  ToDevice(out->typed_data(), values.data(), values.size() * sizeof(int64_t), stream);
  return ffi::Error::Success();
}

ffi::Error Int64FromWordsCudaImpl(cudaStream_t stream, ffi::Buffer<ffi::U32> words,
                                  ffi::Result<ffi::Buffer<ffi::S64>> out) {
  if (words.element_count() != 2 * out->element_count()) return Fail("expected two words a value");
  const cudaError_t error = cudaMemcpyAsync(out->typed_data(), words.typed_data(),
                                            out->size_bytes(), cudaMemcpyDeviceToDevice, stream);
  return error == cudaSuccess ? ffi::Error::Success() : Fail(CudaFailure("copying", error));
}

// Zero bytes in every result, on the stream (see ZerosImpl in ffi_cpu.cc).
ffi::Error ZerosCudaImpl(cudaStream_t stream, ffi::RemainingRets rets) {
  for (size_t i = 0; i < rets.size(); ++i) {
    auto result = rets.get<ffi::AnyBuffer>(i);
    if (!result.has_value()) return Fail("zeros: result " + std::to_string(i) + " is not a buffer");
    const cudaError_t error =
        cudaMemsetAsync((*result)->untyped_data(), 0, (*result)->size_bytes(), stream);
    if (error != cudaSuccess) return Fail(CudaFailure("zeroing", error));
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(ZerosCuda, Guarded<&ZerosCudaImpl>::Run,
                              BindZeros(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(ShardTotalsCuda, Guarded<&ShardTotalsCudaImpl>::Run,
                              BindShardTotals(ffi::Ffi::Bind()
                                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(ShardTopsCuda, Guarded<&ShardTopsCudaImpl>::Run,
                              BindShardTops(ffi::Ffi::Bind()
                                                .Ctx<ffi::PlatformStream<cudaStream_t>>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(ShardRankCuda, Guarded<&ShardRankCudaImpl>::Run,
                              BindShardRank(ffi::Ffi::Bind()
                                                .Ctx<ffi::PlatformStream<cudaStream_t>>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(ShardPlanCuda, Guarded<&ShardPlanCudaImpl>::Run,
                              BindShardPlan(ffi::Ffi::Bind()
                                                .Ctx<ffi::PlatformStream<cudaStream_t>>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(ShardServeCuda, Guarded<&ShardServeCudaImpl>::Run,
                              BindShardServe(ffi::Ffi::Bind()
                                                 .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                                 .Ctx<ffi::ScratchAllocator>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(ShardKeysCuda, Guarded<&ShardKeysCudaImpl>::Run,
                              BindShardKeys(ffi::Ffi::Bind()
                                                .Ctx<ffi::PlatformStream<cudaStream_t>>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(Int64FromWordsCuda, Guarded<&Int64FromWordsCudaImpl>::Run,
                              BindInt64FromWords(ffi::Ffi::Bind()
                                                     .Ctx<ffi::PlatformStream<cudaStream_t>>()));

}  // namespace gearjax
