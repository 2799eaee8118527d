// The steps of a ShardedTable's xla exchange (gearjax/sharded/exchange.py,
// core/sharding/sharding.h) that only exchange a few words per shard or per row, each
// written once for every platform: a step reads its operands and writes its
// results through a `Memory`, the platform's copy policy. On the CPU, XLA's
// buffers are host memory and the policy (HostMemory, below) hands them over
// as they are; on a GPU (cuda/ffi_cuda_shard.cu, DeviceMemory) operands are
// copied to the host, results staged on the host and copied to the GPU at
// Publish(). The arithmetic is the core's either way. The owner's gather
// (ShardServe) moves the windows in bulk and is the platforms' own, after the
// checks of ServeShape.
//
// A Memory provides:
//   std::shared_ptr<Table> Table(int64_t handle)   the table, checked for this platform;
//   const T* Read(const T* operand, size_t count)  the operand's values on the host;
//   T* Write(T* result, size_t count)              host values that become the result;
//   void Publish()                                 makes every Write's values the results;
//   void Copy(void* result, const void* operand, size_t bytes);
//   void Zero(void* result, size_t bytes).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "core/sharding/sharding.h"
#include "core/table/table.h"
#include "ffi/ffi_common.h"
#include "xla/ffi/api/ffi.h"

namespace gearjax {

// The CPU's Memory: XLA's buffers are the host values.
struct HostMemory {
  std::shared_ptr<gearjax::Table> Table(int64_t handle) const { return LookUpTable(handle); }
  template <typename T>
  const T* Read(const T* operand, size_t) const { return operand; }
  template <typename T>
  T* Write(T* result, size_t) const { return result; }
  void Publish() const {}
  void Copy(void* result, const void* operand, size_t bytes) const {
    std::memcpy(result, operand, bytes);
  }
  void Zero(void* result, size_t bytes) const { std::memset(result, 0, bytes); }
};

namespace shard_steps {

namespace ffi = xla::ffi;

// Step 1 of a global sample: this shard's summary for the strategy, as eight
// uint32 words.
template <typename Memory>
ffi::Error Totals(Memory memory, Order, ffi::Result<Order>,
                  ffi::Result<ffi::Buffer<ffi::U32>> summary, int64_t table_handle,
                  int64_t strategy, double alpha, int64_t shard) {
  std::shared_ptr<Table> table = memory.Table(table_handle);
  if (summary->element_count() != kSummaryWords) return Fail("the summary has the wrong size");
  *memory.Write(reinterpret_cast<ShardSummary*>(summary->typed_data()), 1) =
      Summarize(shard, table->Totals(ShardRequest(strategy, alpha)));
  memory.Publish();
  return ffi::Error::Success();
}

// Step 1 for TopK and Recent: this shard's summary (its weight: the length
// of its list) and its best list of `per_shard` entries (TopEntry as four
// uint32 words each; past the list, stamp -1), in one snapshot.
template <typename Memory>
ffi::Error Tops(Memory memory, Order, ffi::Result<Order>,
                ffi::Result<ffi::Buffer<ffi::U32>> summary,
                ffi::Result<ffi::Buffer<ffi::U32>> entries, int64_t table_handle,
                int64_t strategy, int64_t count, int64_t shard) {
  std::shared_ptr<Table> table = memory.Table(table_handle);
  if (summary->element_count() != kSummaryWords) return Fail("the summary has the wrong size");
  const SampleRequest request =
      TopsRequest(strategy, count, static_cast<int64_t>(entries->element_count()),
                  table->spec().capacity);
  const int64_t per_shard = static_cast<int64_t>(entries->element_count()) / kEntryWords;
  TopEntry* list = memory.Write(reinterpret_cast<TopEntry*>(entries->typed_data()),
                                static_cast<size_t>(per_shard));
  std::fill(list, list + per_shard, TopEntry{0.0, -1});
  *memory.Write(reinterpret_cast<ShardSummary*>(summary->typed_data()), 1) =
      Summarize(shard, table->Tops(request, list));
  memory.Publish();
  return ffi::Error::Success();
}

// The number of shards whose summaries `words` (uint32) holds, checked.
inline int64_t SummaryCount(size_t words, int64_t shards) {
  if (shards < 1 || static_cast<int64_t>(words) != shards * kSummaryWords) {
    throw InvalidArgument("the gathered summaries have the wrong size");
  }
  return shards;
}

// Step 1b for TopK and Recent (no table is touched): the gathered summaries
// with each shard's weight replaced by its share of the global best `count`
// (RankShards), from the gathered best lists.
template <typename Memory>
ffi::Error Rank(Memory memory, ffi::Buffer<ffi::U32> summaries, ffi::Buffer<ffi::U32> entries,
                ffi::Result<ffi::Buffer<ffi::U32>> ranked, int64_t strategy, int64_t count) {
  if (ranked->element_count() != summaries.element_count()) return Fail("sizes differ");
  const RankShape shape = RankShapeOf(static_cast<int64_t>(summaries.element_count()),
                                      static_cast<int64_t>(entries.element_count()));
  const size_t shards = static_cast<size_t>(shape.shards);
  const SampleRequest request = ShardRequest(strategy, 0.0, count);
  const TopEntry* lists = memory.Read(reinterpret_cast<const TopEntry*>(entries.typed_data()),
                                      shards * static_cast<size_t>(shape.per_shard));
  ShardSummary* out = memory.Write(reinterpret_cast<ShardSummary*>(ranked->typed_data()), shards);
  std::memcpy(out, memory.Read(reinterpret_cast<const ShardSummary*>(summaries.typed_data()),
                               shards),
              shards * sizeof(ShardSummary));
  RankShards(request.strategy, count, lists, shape.per_shard, out, shape.shards);
  memory.Publish();
  return ffi::Error::Success();
}

// Step 2: the shard of each row of each requester (no table is touched):
// requester j's rows from seeds[j], so every process computes every
// process's plan from one gather and knows what is asked of its shard.
template <typename Memory>
ffi::Error Plan(Memory memory, ffi::Buffer<ffi::U32> seeds, ffi::Buffer<ffi::U32> summaries,
                ffi::Result<ffi::Buffer<ffi::S32>> shard_of_row,
                ffi::Result<ffi::Buffer<ffi::S32>> rank_in_shard,
                ffi::Result<ffi::Buffer<ffi::S32>> counts) {
  const int64_t requesters = static_cast<int64_t>(seeds.element_count()) / 2;
  if (requesters < 1 || static_cast<int64_t>(seeds.element_count()) != 2 * requesters) {
    return Fail("expected two seed words per requester");
  }
  const int64_t shards = static_cast<int64_t>(counts->element_count()) / requesters;
  if (shards * requesters != static_cast<int64_t>(counts->element_count()) ||
      shard_of_row->element_count() % requesters != 0 ||
      rank_in_shard->element_count() != shard_of_row->element_count()) {
    return Fail("the plan's results do not match the requesters");
  }
  const ShardSummary* s =
      memory.Read(reinterpret_cast<const ShardSummary*>(summaries.typed_data()),
                  static_cast<size_t>(SummaryCount(summaries.element_count(), shards)));
  const uint32_t* seed = memory.Read(seeds.typed_data(), seeds.element_count());
  const int64_t batch = static_cast<int64_t>(shard_of_row->element_count()) / requesters;
  int32_t* rows = memory.Write(shard_of_row->typed_data(), shard_of_row->element_count());
  int32_t* ranks = memory.Write(rank_in_shard->typed_data(), rank_in_shard->element_count());
  int32_t* per_shard = memory.Write(counts->typed_data(), counts->element_count());
  for (int64_t j = 0; j < requesters; ++j) {
    PlanShards(s, shards, seed + 2 * j, batch, rows + j * batch, ranks + j * batch,
               per_shard + j * shards);
  }
  memory.Publish();
  return ffi::Error::Success();
}

// Keys between a shard's own layout and the global one (sharding.h,
// GlobalKey): to_local maps global keys of shard `shard` to its own keys and
// every other key to -1 (update_priorities skips those); otherwise own keys
// become global.
template <typename Memory>
ffi::Error Keys(Memory memory, ffi::Buffer<ffi::S64> keys, ffi::Result<ffi::Buffer<ffi::S64>> out,
                int64_t shard, int64_t shard_shift, int64_t to_local) {
  if (shard_shift < 1 || shard_shift > 62 || shard < 0 ||
      shard >= (int64_t{1} << (63 - shard_shift))) {
    return Fail("shard or shard_shift out of range");
  }
  if (out->element_count() != keys.element_count()) return Fail("keys differ in size");
  const size_t count = keys.element_count();
  TranslateKeys(memory.Read(keys.typed_data(), count), memory.Write(out->typed_data(), count),
                static_cast<int64_t>(count), shard, static_cast<int>(shard_shift), to_local != 0);
  memory.Publish();
  return ffi::Error::Success();
}

// int64 values from their two uint32 words (little-endian): how host data
// with 64-bit keys (a one-sided sample's) becomes a JAX int64 array where JAX
// without x64 would narrow it to int32 on the way in.
template <typename Memory>
ffi::Error Int64FromWords(Memory memory, ffi::Buffer<ffi::U32> words,
                          ffi::Result<ffi::Buffer<ffi::S64>> out) {
  if (words.element_count() != 2 * out->element_count()) return Fail("expected two words a value");
  memory.Copy(out->typed_data(), words.typed_data(), out->size_bytes());
  return ffi::Error::Success();
}

// Zero bytes in every result: what the other devices compute where a table
// call runs on one device of several (gearjax/_primitives.py,
// one_logical_call), whatever the results' dtypes.
template <typename Memory>
ffi::Error Zeros(Memory memory, ffi::RemainingRets rets) {
  for (size_t i = 0; i < rets.size(); ++i) {
    auto result = rets.get<ffi::AnyBuffer>(i);
    if (!result.has_value()) return Fail("zeros: result " + std::to_string(i) + " is not a buffer");
    memory.Zero((*result)->untyped_data(), (*result)->size_bytes());
  }
  return ffi::Error::Success();
}

// The owner's part of step 3 (ShardServe), its arguments checked alike on
// every platform: `shards` requesters, each with two seed words, a summary
// and a block of `block` rows of the results.
struct ServeShape {
  int64_t shards, rows;
};

inline ServeShape CheckServe(size_t seed_words, size_t count_words, size_t summary_words,
                             int64_t block, int64_t shard_shift) {
  const int64_t shards = static_cast<int64_t>(count_words);
  if (static_cast<int64_t>(seed_words) != 2 * shards) {
    throw InvalidArgument("expected two seed words per requester");
  }
  SummaryCount(summary_words, shards);
  if (block < 1 || shards > kMaxBatch / block) throw InvalidArgument("block size out of range");
  if (shard_shift < 1 || shard_shift > 62) throw InvalidArgument("shard_shift out of range");
  return {shards, shards * block};
}

}  // namespace shard_steps

// A step bound to a platform's Memory: OnPlatform<Memory, &Step<Memory>>::Run
// takes the step's operands after the platform's context (none on the CPU;
// the stream on a GPU, where Memory is made from it).
template <typename Memory, auto Step, typename Signature = decltype(Step)>
struct OnPlatform;

template <typename Memory, auto Step, typename... Args>
struct OnPlatform<Memory, Step, xla::ffi::Error (*)(Memory, Args...)> {
  static xla::ffi::Error Run(Args... args) { return Step(Memory{}, std::move(args)...); }
  template <typename Context>
  static xla::ffi::Error RunWith(Context context, Args... args) {
    return Step(Memory{context}, std::move(args)...);
  }
};

}  // namespace gearjax
