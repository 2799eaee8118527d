// CPU XLA FFI handlers. They are thin: resolve the table (through the call
// site an instantiate stage made, call_site.h, or by handle), check the
// buffers against it, let the core select and pin rows, gather the rows (in
// parallel on XLA's intra-op thread pool when the batch is large), end the
// sample.
#include "ffi/ffi_handlers.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/gather_cpu.h"
#include "core/sharding/sharding.h"
#include "core/table/table.h"
#include "ffi/call_site.h"
#include "ffi/ffi_common.h"
#include "ffi/ffi_one_sided.h"
#include "ffi/shard_steps.h"

namespace ffi = xla::ffi;

namespace gearjax {
namespace {

// Below this many output bytes a batch is gathered on the calling thread:
// waking a pool thread costs more than it saves. Above it, the calling thread
// and the pool share the rows: random windows of a table larger than the
// last-level cache are bound by memory latency, and two cores keep twice the
// misses in flight. Measured on the 2-core dev VM (8 MiB L3), in a jitted
// lax.scan over a 13.6 MB table (windows of 20 x 68 bytes): 256 rows (348 KB)
// took 78 us a step inline and 55 us shared; 128 rows (174 KB) 62 and 56 us;
// 64 rows (87 KB) 21 us inline and 41 us shared.
constexpr int64_t kParallelMinBytes = int64_t{128} << 10;
// Chunks the rows are shared out in. Small, because the caller waits for
// every chunk a helper has taken: with 1 MiB chunks a 532 KB batch split into
// two halves, and the caller, done with its half, waited for a helper that
// woke late or was preempted. On the 2-core VM, with 64 KiB chunks a jitted
// sample of 256 windows of 20 took 0.93 of the time interleaved and 0.82 in
// runs, the same sample in a lax.scan 0.83 and 0.88 (paired medians of 4
// rounds: benchmarks/results/bench_against_chunks_99e497b_cpu.txt).
constexpr int64_t kBytesPerChunk = int64_t{64} << 10;

// Rows split into contiguous chunks; the calling thread and pool workers take
// chunks from a shared counter. The caller always takes part and then waits
// only for chunks already taken, so it never depends on a worker being free.
struct GatherJob {
  std::atomic<int64_t> next_chunk{0};
  std::atomic<int64_t> done_chunks{0};
  int64_t num_chunks = 0, rows_per_chunk = 0, rows = 0;
  std::function<void(int64_t, int64_t)> run_rows;

  void Work() {
    for (;;) {
      const int64_t chunk = next_chunk.fetch_add(1);
      if (chunk >= num_chunks) return;
      const int64_t begin = chunk * rows_per_chunk;
      run_rows(begin, std::min(rows, begin + rows_per_chunk));
      if (done_chunks.fetch_add(1) + 1 == num_chunks) done_chunks.notify_all();
    }
  }
};

template <typename RunRows>
void GatherParallel(ffi::ThreadPool& pool, int64_t rows, int64_t bytes, RunRows&& run_rows) {
  const int64_t threads = pool.num_threads();
  if (threads <= 1 || bytes < kParallelMinBytes || rows < 2) {
    run_rows(0, rows);  // called directly: no std::function, no allocation
    return;
  }
  // The caller works too, so threads - 1 helpers keep every core busy without
  // oversubscribing it.
  const int64_t tasks = std::min(threads, rows);
  auto job = std::make_shared<GatherJob>();
  job->rows = rows;
  // Chunks of about kBytesPerChunk: when a helper is preempted mid-chunk, the
  // caller waits for at most that much copying.
  job->num_chunks = std::clamp<int64_t>(bytes / kBytesPerChunk, tasks, rows);
  job->rows_per_chunk = (rows + job->num_chunks - 1) / job->num_chunks;
  job->num_chunks = (rows + job->rows_per_chunk - 1) / job->rows_per_chunk;
  job->run_rows = run_rows;
  for (int64_t t = 1; t < tasks; ++t) pool.Schedule([job] { job->Work(); });
  job->Work();
  for (int64_t done = job->done_chunks.load(); done < job->num_chunks;
       done = job->done_chunks.load()) {
    job->done_chunks.wait(done);
  }
}

// Selects (taking a ticket), gathers and returns the ticket; `first` is the
// index of the keys result (1 when the call returns an order result first).
ffi::Error Sample(ffi::ThreadPool& pool, const ffi::Buffer<ffi::U32>& seed,
                  ffi::RemainingRets& rets, size_t first, const SampleSite& at) {
  SampleSite fresh;
  const SampleSite& site = Current(at, fresh);
  std::shared_ptr<Table> table = site.table.Resolve();
  if (table->on_device()) {
    return Fail("this table lives in GPU memory (placement 'device'): sample it from a "
                "program on the GPU");
  }
  // A call whose program reads neither mask nor timestep has neither among
  // its results (gearjax/_ffi.py's DCE rule), and they are not written.
  const SampleResults results =
      rets.size() == SampleResultCount(*table, first, SampleResults::kHost)
          ? SampleResults::kHost
          : SampleResults::kHostWithSteps;
  const SampleCall call =
      BindSampleCall(*table, site, seed.element_count(), rets, first, results);
  const SampleRequest& request = call.request;
  const int64_t batch = request.batch, width = call.width;
  const SampleOutputs& out = call.out;
  const bool pad_left = site.attrs.pad_left != 0;
  int64_t row_bytes = 0;
  for (int c = 0; c < table->num_columns(); ++c) row_bytes += width * table->step_bytes(c);

  SelectAndGather(*table, request, seed.typed_data(), [&](const Draw* draws) {
    GatherParallel(pool, batch, batch * row_bytes, [&](int64_t begin, int64_t end) {
      GatherRows(*table, draws, begin, end, width, pad_left, out);
    });
  });
  return ffi::Error::Success();
}

// The sample handlers in their two registrations (gearjax/_ffi.py): staged
// (an instantiate stage makes the call site once, execute reads it) and per
// call (the site made from the attributes on every call).
using SampleState = SampleStateCpu;
using UpdateState = UpdateStateCpu;

ffi::ErrorOr<std::unique_ptr<SampleState>> SampleInstantiate(SampleAttrs attrs) {
  return Instantiated<SampleState>(MakeSampleSite(attrs));
}

ffi::Error SampleImpl(ffi::ThreadPool pool, Order, ffi::Buffer<ffi::U32> seed,
                             ffi::RemainingRets rets, SampleAttrs attrs) {
  return Sample(pool, seed, rets, /*first=*/1, MakeSampleSite(attrs));
}

ffi::Error SampleStagedImpl(ffi::ThreadPool pool, SampleState* state, Order,
                                   ffi::Buffer<ffi::U32> seed, ffi::RemainingRets rets) {
  return Sample(pool, seed, rets, /*first=*/1, state->site);
}

// The buffer's elements as keys / priorities (host memory: this is the CPU).
bool ReadKeys(const ffi::AnyBuffer& buffer, std::vector<int64_t>& out) {
  return gearjax::ReadKeys(buffer.element_type(), buffer.untyped_data(), buffer.element_count(),
                           out);
}

bool ReadPriorities(const ffi::AnyBuffer& buffer, std::vector<double>& out) {
  return gearjax::ReadPriorities(buffer.element_type(), buffer.untyped_data(),
                                 buffer.element_count(), out);
}

ffi::Error UpdatePriorities(const ffi::AnyBuffer& keys, const ffi::AnyBuffer& priorities,
                            ffi::Result<ffi::Buffer<ffi::S32>>& updated, const TableSite& site) {
  std::shared_ptr<Table> table = site.Resolve();
  // Reused by every update on this thread: no allocation per call.
  thread_local std::vector<int64_t> key_values;
  thread_local std::vector<double> priority_values;
  if (!ReadKeys(keys, key_values)) return Fail("keys must be int32, uint32 or int64");
  if (!ReadPriorities(priorities, priority_values)) {
    return Fail("priorities must be float32 or float64");
  }
  if (key_values.size() != priority_values.size()) {
    return Fail("keys and priorities differ in size");
  }
  *updated->typed_data() = static_cast<int32_t>(table->UpdatePriorities(
      key_values.data(), priority_values.data(), static_cast<int64_t>(key_values.size())));
  return ffi::Error::Success();
}

ffi::ErrorOr<std::unique_ptr<UpdateState>> UpdateInstantiate(int64_t table_handle) {
  return Instantiated<UpdateState>(MakeTableSite(table_handle));
}

ffi::Error UpdatePrioritiesImpl(Order, ffi::AnyBuffer keys, ffi::AnyBuffer priorities,
                                ffi::Result<Order>,
                                ffi::Result<ffi::Buffer<ffi::S32>> updated, int64_t table_handle) {
  return UpdatePriorities(keys, priorities, updated, MakeTableSite(table_handle));
}

ffi::Error UpdatePrioritiesStagedImpl(UpdateState* state, Order, ffi::AnyBuffer keys,
                                      ffi::AnyBuffer priorities, ffi::Result<Order>,
                                      ffi::Result<ffi::Buffer<ffi::S32>> updated) {
  return UpdatePriorities(keys, priorities, updated, state->site);
}

ffi::Error UpdateStepPrioritiesImpl(Order, ffi::AnyBuffer keys, ffi::AnyBuffer steps,
                                    ffi::AnyBuffer priorities, ffi::Result<Order>,
                                    ffi::Result<ffi::Buffer<ffi::S32>> updated,
                                    int64_t table_handle) {
  std::shared_ptr<Table> table = MakeTableSite(table_handle).Resolve();
  *updated->typed_data() = UpdateStepPrioritiesOnHost(
      *table, keys.element_type(), keys.untyped_data(), keys.element_count(),
      steps.element_type(), steps.untyped_data(), steps.element_count(),
      priorities.element_type(), priorities.untyped_data(), priorities.element_count());
  return ffi::Error::Success();
}

// Inserts N trajectories given as padded arrays [N, T, *step] per column (the
// first lengths[i] steps of row i are real); see InsertBatchRows.
ffi::Error InsertBatchImpl(Order, ffi::AnyBuffer lengths, ffi::AnyBuffer priorities,
                           ffi::RemainingArgs columns, ffi::Result<Order>,
                           ffi::Result<ffi::Buffer<ffi::S64>> keys, int64_t table_handle,
                           int64_t rows, int64_t steps) {
  std::shared_ptr<Table> table = LookUpTable(table_handle);
  if (table->on_device()) {
    return Fail("this table lives in GPU memory (placement 'device'): insert_batch from a "
                "program on the GPU, or insert from the host");
  }
  std::vector<int64_t> length_values;
  std::vector<double> priority_values;
  if (!ReadKeys(lengths, length_values)) return Fail("lengths must be int32 or int64");
  if (!ReadPriorities(priorities, priority_values)) {
    return Fail("priorities must be float32 or float64");
  }
  uint8_t* arena = table->arena_data();
  InsertBatchRows(
      *table, rows, steps, columns, keys->element_count(), length_values, priority_values,
      [&](const std::vector<ColumnCopy>& copies) {
        for (const ColumnCopy& c : copies) std::memcpy(arena + c.dst_offset, c.src, c.bytes);
      },
      keys->typed_data());
  return ffi::Error::Success();
}

// ------------------------------------------------ sharded tables (sharding.h)

// Step 3, the owner's part: for each requester j, counts[j] rows drawn with
// seeds[j] into the first rows of block j of `block` rows. The rest of each
// block is left unwritten: the requester never reads it.
ffi::Error ShardServeImpl(ffi::ThreadPool pool, Order, ffi::Buffer<ffi::U32> seeds,
                          ffi::Buffer<ffi::S32> counts, ffi::Buffer<ffi::U32> summaries,
                          ffi::RemainingRets rets, int64_t table_handle, int64_t block,
                          int64_t strategy, double alpha, int64_t window, int64_t pad_left,
                          int64_t shard, int64_t shard_shift, int64_t ragged) {
  std::shared_ptr<Table> table = LookUpTable(table_handle);
  if (table->on_device()) {
    return Fail("this shard lives in GPU memory (placement 'device'); sharded samples gather "
                "on the host");
  }
  const shard_steps::ServeShape shape = shard_steps::CheckServe(
      seeds.element_count(), counts.element_count(), summaries.element_count(), block,
      shard_shift);
  const int64_t shards = shape.shards, rows = shape.rows;
  const auto* s = reinterpret_cast<const ShardSummary*>(summaries.typed_data());
  const SampleCall call = BindSampleCall(
      *table, 2, rets, /*first=*/1,
      {table_handle, rows, strategy, alpha, ServeRequestCount(strategy), window, pad_left,
       static_cast<int64_t>(Cut::kStart), /*replace=*/1},
      SampleResults::kHost);
  std::vector<Draw> draws(static_cast<size_t>(rows));
  struct EndSamples {
    Table& table;
    std::vector<uint64_t> tickets;
    ~EndSamples() {
      for (uint64_t t : tickets) table.EndSample(t);
    }
  } end{*table, ServeDraws(*table, call.request, shard, static_cast<int>(shard_shift), s,
                           shards, seeds.typed_data(), counts.typed_data(), block,
                           draws.data())};
  int64_t row_bytes = 0;
  for (int c = 0; c < table->num_columns(); ++c) row_bytes += call.width * table->step_bytes(c);
  // The rows asked for, block by block, as one list of row ranges.
  int64_t asked = 0;
  for (int64_t j = 0; j < shards; ++j) asked += counts.typed_data()[j];
  std::vector<int64_t> row_of(static_cast<size_t>(asked));
  for (int64_t j = 0, r = 0; j < shards; ++j) {
    for (int64_t b = 0; b < counts.typed_data()[j]; ++b) row_of[r++] = j * block + b;
  }
  GatherParallel(pool, asked, asked * row_bytes, [&](int64_t begin, int64_t end_row) {
    // Consecutive entries of row_of are consecutive rows within a block.
    for (int64_t i = begin; i < end_row;) {
      int64_t run = i + 1;
      while (run < end_row && row_of[run] == row_of[run - 1] + 1) ++run;
      GatherRows(*table, draws.data(), row_of[i], row_of[i] + (run - i), call.width,
                 pad_left != 0, call.out);
      i = run;
    }
  });
  // A ragged all-to-all sends the rows asked; a blocked one, whole blocks.
  table->exchange_counters().Record(ragged ? 0 : block, asked, ragged ? asked : rows, row_bytes);
  return ffi::Error::Success();
}

// The sharded steps (shard_steps.h) over host memory.
template <auto Step>
using OnCpu = OnPlatform<HostMemory, Step>;

XLA_FFI_DEFINE_HANDLER_SYMBOL(ZerosCpu, Guarded<&OnCpu<&shard_steps::Zeros<HostMemory>>::Run>::Run,
                              BindZeros(ffi::Ffi::Bind()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Int64FromWordsCpu, Guarded<&OnCpu<&shard_steps::Int64FromWords<HostMemory>>::Run>::Run,
    BindInt64FromWords(ffi::Ffi::Bind()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(ShardKeysCpu,
                              Guarded<&OnCpu<&shard_steps::Keys<HostMemory>>::Run>::Run,
                              BindShardKeys(ffi::Ffi::Bind()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(ShardTotalsCpu,
                              Guarded<&OnCpu<&shard_steps::Totals<HostMemory>>::Run>::Run,
                              BindShardTotals(ffi::Ffi::Bind()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(ShardTopsCpu,
                              Guarded<&OnCpu<&shard_steps::Tops<HostMemory>>::Run>::Run,
                              BindShardTops(ffi::Ffi::Bind()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(ShardRankCpu,
                              Guarded<&OnCpu<&shard_steps::Rank<HostMemory>>::Run>::Run,
                              BindShardRank(ffi::Ffi::Bind()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(ShardPlanCpu,
                              Guarded<&OnCpu<&shard_steps::Plan<HostMemory>>::Run>::Run,
                              BindShardPlan(ffi::Ffi::Bind()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(ShardServeCpu, Guarded<&ShardServeImpl>::Run,
                              BindShardServe(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(SampleCpu, Guarded<&SampleImpl>::Run,
                              BindSampleAttrs(ffi::Ffi::Bind()
                                                  .Ctx<ffi::ThreadPool>()
                                                  .Arg<Order>()
                                                  .Arg<ffi::Buffer<ffi::U32>>()
                                                  .RemainingRets()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(SampleInstantiateCpu, SampleInstantiate,
                              BindSampleAttrs(ffi::Ffi::BindInstantiate()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(SampleExecuteCpu, Guarded<&SampleStagedImpl>::Run,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Ctx<ffi::State<SampleState>>()
                                  .Arg<Order>()
                                  .Arg<ffi::Buffer<ffi::U32>>()
                                  .RemainingRets());

XLA_FFI_DEFINE_HANDLER_SYMBOL(UpdatePrioritiesCpu, Guarded<&UpdatePrioritiesImpl>::Run,
                              BindUpdatePriorities(ffi::Ffi::Bind()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(UpdateInstantiateCpu, UpdateInstantiate,
                              BindUpdateAttrs(ffi::Ffi::BindInstantiate()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(UpdateExecuteCpu, Guarded<&UpdatePrioritiesStagedImpl>::Run,
                              BindUpdateOperands(
                                  ffi::Ffi::Bind().Ctx<ffi::State<UpdateState>>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(InsertBatchCpu, Guarded<&InsertBatchImpl>::Run,
                              BindInsertBatch(ffi::Ffi::Bind()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(UpdateStepPrioritiesCpu, Guarded<&UpdateStepPrioritiesImpl>::Run,
                              BindUpdateStepPriorities(ffi::Ffi::Bind()));

}  // namespace

PlatformTargets CpuTargets() {
  return {{{"gearjax_sample", SampleCpu, SampleInstantiateCpu, SampleExecuteCpu},
           {"gearjax_update_priorities", UpdatePrioritiesCpu, UpdateInstantiateCpu,
            UpdateExecuteCpu}},
          {{"gearjax_insert_batch", InsertBatchCpu},
           {"gearjax_update_step_priorities", UpdateStepPrioritiesCpu},
           {"gearjax_shard_totals", ShardTotalsCpu},
           {"gearjax_shard_plan", ShardPlanCpu},
           {"gearjax_shard_tops", ShardTopsCpu},
           {"gearjax_shard_rank", ShardRankCpu},
           {"gearjax_shard_serve", ShardServeCpu},
           {"gearjax_shard_keys", ShardKeysCpu},
           {"gearjax_int64_from_words", Int64FromWordsCpu},
           {"gearjax_zeros", ZerosCpu},
           {"gearjax_one_sided_sample", OneSidedSampleCpu}}};
}

}  // namespace gearjax
