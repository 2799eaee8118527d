// What the CPU and CUDA FFI handlers share: error conversion, table lookup by
// handle, reading keys and priorities, binding the sample results to the
// layout the gathers write, and the row loop of insert_batch.
//
// Ordering (the contract with gearjax/_ffi.py): every call that reads or
// changes a table (sample, update_priorities, insert_batch, the sharded
// calls) takes an *order operand* first and returns its successor first: the
// table state the program threads through its table calls (gx.TableState; the
// result aliases the operand). The handlers bind it and never read or write
// it: it carries no data, only the data dependence that orders the calls.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/decode.h"
#include "core/gather_cpu.h"
#include "core/huge_pages.h"
#include "core/limits.h"
#include "core/table/insert_rows.h"
#include "core/table/registry.h"
#include "core/table/table.h"
#include "xla/ffi/api/ffi.h"

namespace gearjax {

// A sample's attributes, as every sample handler (CPU and CUDA) takes them:
// one struct, decoded by name from the custom call's attributes
// (gearjax/_ffi.py sample_call sets them), checked by BindSampleCall and
// Table::CheckRequest.
struct SampleAttrs {
  int64_t table_handle;
  int64_t batch_size;
  int64_t strategy;  // Strategy's code
  double alpha;      // Prioritized
  int64_t count;     // TopK's k, Recent's n
  int64_t window;    // 0: whole trajectories
  int64_t pad_left;  // 0 or 1
  int64_t cut;       // Cut's code
  int64_t replace;   // 0 or 1
};

}  // namespace gearjax

XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(
    gearjax::SampleAttrs, StructMember<int64_t>("table_handle"),
    StructMember<int64_t>("batch_size"), StructMember<int64_t>("strategy"),
    StructMember<double>("alpha"), StructMember<int64_t>("count"),
    StructMember<int64_t>("window"), StructMember<int64_t>("pad_left"),
    StructMember<int64_t>("cut"), StructMember<int64_t>("replace"));

namespace gearjax {

// Results before the per-column buffers, in order (after the order result,
// when the call has one).
enum FixedOutput { kKeys = 0, kStart, kProbability, kTableSize, kValid, kNumFixed };

inline xla::ffi::Error Fail(const std::string& what) {
  return xla::ffi::Error(xla::ffi::ErrorCode::kInvalidArgument, "gearjax: " + what);
}

// Error codes: a rate-limiter timeout, a closed table and a wait that gave
// way to a signal (interrupts.h) are FAILED_PRECONDITION (the table is not
// in a state that allows the call), everything else INVALID_ARGUMENT; the message says which. Never
// DEADLINE_EXCEEDED: jax 0.11's GPU runtime took that code from a custom call
// for its own collective timeouts and crashed the process (SIGSEGV; the first
// GPU run, 2026-11-26), while the codes used here came back as Python errors.
// One code per failure on every platform, so the CPU and the GPU agree. The
// FAILED_PRECONDITION kinds carry a tag, "gearjax [timeout]:",
// "gearjax [closed]:" and "gearjax [interrupted]:", because JAX hands a
// failure to Python as one of two
// classes depending on how the program was dispatched (docs: Semantics in
// jit, "Errors in compiled code"): gearjax.table_error reads the kind from the
// tag, never from the rest of the message, which may hold a table's name.
inline xla::ffi::Error FromException(std::exception_ptr p) {
  namespace ffi = xla::ffi;
  try {
    std::rethrow_exception(p);
  } catch (const Shortfall& e) {
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      std::string("gearjax [shortfall]: ") + e.what());
  } catch (const Timeout& e) {
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      std::string("gearjax [timeout]: ") + e.what());
  } catch (const Closed& e) {
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      std::string("gearjax [closed]: ") + e.what());
  } catch (const Interrupted& e) {
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      std::string("gearjax [interrupted]: ") + e.what());
  } catch (const std::exception& e) {
    return Fail(e.what());
  }
}

// Every handler's one error path: a handler is defined as
// Guarded<&BodyImpl>::Run, so its body returns an error or throws, and
// whatever it throws becomes the ffi::Error XLA reports (FromException),
// never an exception escaping into XLA.
template <auto Body, typename Signature = decltype(Body)>
struct Guarded;

template <auto Body, typename... Args>
struct Guarded<Body, xla::ffi::Error (*)(Args...)> {
  static xla::ffi::Error Run(Args... args) {
    try {
      return Body(std::move(args)...);
    } catch (...) {
      return FromException(std::current_exception());
    }
  }
};

// The formats of keys (int32, uint32 or int64) and priorities (float32 or
// float64) as XLA passes them; false for other dtypes.
inline bool KeyFormatOf(xla::ffi::DataType type, KeyFormat* format) {
  using xla::ffi::DataType;
  switch (type) {
    case DataType::S32: *format = KeyFormat::kInt32; return true;
    case DataType::U32: *format = KeyFormat::kUInt32; return true;
    case DataType::S64: *format = KeyFormat::kInt64; return true;
    default: return false;
  }
}

inline bool PriorityFormatOf(xla::ffi::DataType type, PriorityFormat* format) {
  using xla::ffi::DataType;
  switch (type) {
    case DataType::F32: *format = PriorityFormat::kFloat32; return true;
    case DataType::F64: *format = PriorityFormat::kFloat64; return true;
    default: return false;
  }
}

// Reads n keys into int64 (core/decode.h); false for other dtypes.
inline bool ReadKeys(xla::ffi::DataType type, const void* data, size_t n,
                     std::vector<int64_t>& out) {
  KeyFormat format;
  if (!KeyFormatOf(type, &format)) return false;
  DecodeKeys(format, data, n, out);
  return true;
}

// Reads n priorities into float64 (core/decode.h); false for other dtypes.
// Values are checked later, by the table (CheckPriority).
inline bool ReadPriorities(xla::ffi::DataType type, const void* data, size_t n,
                           std::vector<double>& out) {
  PriorityFormat format;
  if (!PriorityFormatOf(type, &format)) return false;
  DecodePriorities(format, data, n, out);
  return true;
}

// update_priorities(..., steps=): keys [B], steps and priorities [B, W], all
// in host memory (the CUDA handler copies them there first); returns how
// many rows named a live key (Table::UpdateStepPriorities). Throws
// InvalidArgument for other dtypes or shapes.
inline int32_t UpdateStepPrioritiesOnHost(Table& table, xla::ffi::DataType key_type,
                                          const void* keys, size_t rows,
                                          xla::ffi::DataType step_type, const void* steps,
                                          size_t entries, xla::ffi::DataType priority_type,
                                          const void* priorities, size_t values) {
  thread_local std::vector<int64_t> key_values, step_values;
  thread_local std::vector<double> priority_values;
  if (!ReadKeys(key_type, keys, rows, key_values)) {
    throw InvalidArgument("keys must be int32, uint32 or int64");
  }
  if (!ReadKeys(step_type, steps, entries, step_values)) {
    throw InvalidArgument("steps must be int32 or int64");
  }
  if (!ReadPriorities(priority_type, priorities, values, priority_values)) {
    throw InvalidArgument("priorities must be float32 or float64");
  }
  if (entries != values || (rows == 0 ? entries != 0 : entries % rows != 0)) {
    throw InvalidArgument("steps and priorities must be [keys, width] alike");
  }
  const int64_t width = rows == 0 ? 0 : static_cast<int64_t>(entries / rows);
  return static_cast<int32_t>(table.UpdateStepPriorities(
      key_values.data(), step_values.data(), priority_values.data(),
      static_cast<int64_t>(rows), width));
}

// The order operand and result of every table call: the table state (a uint32
// scalar the result aliases; see the file comment), never read or written.
using Order = xla::ffi::AnyBuffer;

// update_priorities(..., steps=)'s operands (order, keys, steps,
// priorities), results (order, count) and attribute after each handler's
// context.
template <typename Binding>
auto BindUpdateStepPriorities(Binding&& binding) {
  return std::move(binding)
      .template Arg<Order>()
      .template Arg<xla::ffi::AnyBuffer>()
      .template Arg<xla::ffi::AnyBuffer>()
      .template Arg<xla::ffi::AnyBuffer>()
      .template Ret<Order>()
      .template Ret<xla::ffi::Buffer<xla::ffi::S32>>()
      .template Attr<int64_t>("table_handle");
}

// The sample call's attributes, in the order every sample handler takes them
// after its context, order operand, seed and results.
template <typename Binding>
auto BindSampleAttrs(Binding binding) {
  return std::move(binding).template Attrs<SampleAttrs>();
}

// insert_batch's operands, results and attributes after each handler's
// context: the order operand, lengths, priorities, then one buffer per
// column; the order result and the keys.
template <typename Binding>
auto BindInsertBatch(Binding binding) {
  return std::move(binding)
      .template Arg<Order>()
      .template Arg<xla::ffi::AnyBuffer>()
      .template Arg<xla::ffi::AnyBuffer>()
      .RemainingArgs()
      .template Ret<Order>()
      .template Ret<xla::ffi::Buffer<xla::ffi::S64>>()
      .template Attr<int64_t>("table_handle")
      .template Attr<int64_t>("rows")
      .template Attr<int64_t>("steps");
}

// update_priorities' operands (order, keys, priorities) and results (order,
// count) after each handler's context; its attribute follows them where the
// handler reads it per call (BindUpdatePriorities), else its instantiate stage
// reads it (BindUpdateAttrs; call_site.h).
// (They take the binding by rvalue reference: XLA's bindings cannot be
// moved from outside, so one helper can feed another.)
template <typename Binding>
auto BindUpdateOperands(Binding&& binding) {
  return std::move(binding)
      .template Arg<Order>()
      .template Arg<xla::ffi::AnyBuffer>()
      .template Arg<xla::ffi::AnyBuffer>()
      .template Ret<Order>()
      .template Ret<xla::ffi::Buffer<xla::ffi::S32>>();
}

template <typename Binding>
auto BindUpdateAttrs(Binding&& binding) {
  return std::move(binding).template Attr<int64_t>("table_handle");
}

template <typename Binding>
auto BindUpdatePriorities(Binding&& binding) {
  return BindUpdateAttrs(BindUpdateOperands(std::move(binding)));
}

// The sharded table's calls (sharding.h), after each handler's context: the
// same operands, results and attributes for the CPU and CUDA handlers.
template <typename Binding>
auto BindShardTotals(Binding binding) {
  return std::move(binding)
      .template Arg<Order>()
      .template Ret<Order>()
      .template Ret<xla::ffi::Buffer<xla::ffi::U32>>()
      .template Attr<int64_t>("table_handle")
      .template Attr<int64_t>("strategy")
      .template Attr<double>("alpha")
      .template Attr<int64_t>("shard");
}

template <typename Binding>
auto BindShardTops(Binding binding) {
  return std::move(binding)
      .template Arg<Order>()
      .template Ret<Order>()
      .template Ret<xla::ffi::Buffer<xla::ffi::U32>>()
      .template Ret<xla::ffi::Buffer<xla::ffi::U32>>()
      .template Attr<int64_t>("table_handle")
      .template Attr<int64_t>("strategy")
      .template Attr<int64_t>("count")
      .template Attr<int64_t>("shard");
}

template <typename Binding>
auto BindShardRank(Binding binding) {
  return std::move(binding)
      .template Arg<xla::ffi::Buffer<xla::ffi::U32>>()
      .template Arg<xla::ffi::Buffer<xla::ffi::U32>>()
      .template Ret<xla::ffi::Buffer<xla::ffi::U32>>()
      .template Attr<int64_t>("strategy")
      .template Attr<int64_t>("count");
}

template <typename Binding>
auto BindShardPlan(Binding binding) {
  return std::move(binding)
      .template Arg<xla::ffi::Buffer<xla::ffi::U32>>()
      .template Arg<xla::ffi::Buffer<xla::ffi::U32>>()
      .template Ret<xla::ffi::Buffer<xla::ffi::S32>>()   // shard of each row
      .template Ret<xla::ffi::Buffer<xla::ffi::S32>>()   // its rank in that shard
      .template Ret<xla::ffi::Buffer<xla::ffi::S32>>();  // rows per shard
}

template <typename Binding>
auto BindShardServe(Binding binding) {
  return std::move(binding)
      .template Arg<Order>()
      .template Arg<xla::ffi::Buffer<xla::ffi::U32>>()
      .template Arg<xla::ffi::Buffer<xla::ffi::S32>>()
      .template Arg<xla::ffi::Buffer<xla::ffi::U32>>()
      .RemainingRets()
      .template Attr<int64_t>("table_handle")
      .template Attr<int64_t>("block")
      .template Attr<int64_t>("strategy")
      .template Attr<double>("alpha")
      .template Attr<int64_t>("window")
      .template Attr<int64_t>("pad_left")
      .template Attr<int64_t>("shard")
      .template Attr<int64_t>("shard_shift")
      .template Attr<int64_t>("ragged");
}

template <typename Binding>
auto BindShardKeys(Binding binding) {
  return std::move(binding)
      .template Arg<xla::ffi::Buffer<xla::ffi::S64>>()
      .template Ret<xla::ffi::Buffer<xla::ffi::S64>>()
      .template Attr<int64_t>("shard")
      .template Attr<int64_t>("shard_shift")
      .template Attr<int64_t>("to_local");
}

// gearjax_zeros: any number of results, each filled with zero bytes.
template <typename Binding>
auto BindZeros(Binding binding) {
  return std::move(binding).RemainingRets();
}

template <typename Binding>
auto BindInt64FromWords(Binding binding) {
  return std::move(binding)
      .template Arg<xla::ffi::Buffer<xla::ffi::U32>>()
      .template Ret<xla::ffi::Buffer<xla::ffi::S64>>();
}

// Where a sample handler's results live, and whether mask and timestep are
// among them.
enum class SampleResults {
  kDevice,         // GPU memory; XLA derives mask and timestep (the CUDA handlers)
  kHost,           // host memory, no mask or timestep (the sharded serve step derives
                   // them; a CPU sample whose program reads neither)
  kHostWithSteps,  // host memory, mask and timestep after valid (the CPU sample)
};

// How many results a sample call of `table` has in the form `results`,
// `first` of them before the keys.
inline size_t SampleResultCount(const Table& table, size_t first, SampleResults results) {
  const int steps = results == SampleResults::kHostWithSteps ? 2 : 0;
  return first + static_cast<size_t>(kNumFixed + steps + table.num_columns());
}

// Checks every result's size against the table and returns where to write.
// `first` is the index of the keys result (1 after an order result, else 0). Host
// results get huge pages advised (fresh XLA buffers otherwise fault every 4
// KiB on first touch); device results must not be touched here.
inline SampleOutputs BindSampleOutputs(const Table& table, xla::ffi::RemainingRets& rets,
                                       size_t first, int64_t batch, int64_t width,
                                       SampleResults results) {
  const int num_columns = table.num_columns();
  const int steps = results == SampleResults::kHostWithSteps ? 2 : 0;
  const size_t expected = SampleResultCount(table, first, results);
  if (rets.size() != expected) {
    throw InvalidArgument("expected " + std::to_string(expected) + " results, got " +
                          std::to_string(rets.size()));
  }
  auto bind = [&](int i, int64_t expected_bytes, const std::string& what) {
    auto result = rets.get<xla::ffi::AnyBuffer>(first + i).value();
    if (static_cast<int64_t>(result->size_bytes()) != expected_bytes) {
      throw InvalidArgument("result '" + what + "' has the wrong size");
    }
    if (results != SampleResults::kDevice) AdviseHugePages(result->untyped_data(), expected_bytes);
    return result->untyped_data();
  };
  SampleOutputs out;
  out.keys = static_cast<int64_t*>(bind(kKeys, batch * 8, "keys"));
  out.start = static_cast<int32_t*>(bind(kStart, batch * 4, "start"));
  out.probability = static_cast<float*>(bind(kProbability, batch * 4, "probability"));
  out.table_size = static_cast<int64_t*>(bind(kTableSize, batch * 8, "table_size"));
  out.valid = static_cast<int32_t*>(bind(kValid, batch * 4, "valid"));
  if (steps != 0) {
    out.mask = static_cast<bool*>(bind(kNumFixed, batch * width, "mask"));
    out.timestep = static_cast<int32_t*>(bind(kNumFixed + 1, batch * width * 4, "timestep"));
  }
  for (int c = 0; c < num_columns; ++c) {
    out.columns.push_back(static_cast<uint8_t*>(bind(
        kNumFixed + steps + c, batch * width * table.step_bytes(c), table.spec().columns[c].name)));
  }
  return out;
}

// What a sample handler has bound before selecting (call_site.h,
// BindSampleCall): the request, the window width (max_length for whole
// trajectories) and the results. The Python layer checked every value
// already; the checks stop a hand-built call from reaching the core with
// values it would misread.
struct SampleCall {
  SampleRequest request;
  int64_t width;
  SampleOutputs out;
};

// insert_batch's columns as the core's InsertRows takes them: each column
// buffer's bytes, in order (sizes are checked there).
inline std::vector<ColumnSource> ColumnSources(xla::ffi::RemainingArgs& columns) {
  std::vector<ColumnSource> sources;
  for (size_t c = 0; c < columns.size(); ++c) {
    auto column = columns.get<xla::ffi::AnyBuffer>(c).value();
    sources.push_back({static_cast<const uint8_t*>(column.untyped_data()), column.size_bytes()});
  }
  return sources;
}

// insert_batch after its lengths and priorities are read, in a handler:
// core/table/insert_rows.h InsertRows over the call's column buffers.
inline void InsertBatchRows(Table& table, int64_t rows, int64_t steps,
                            xla::ffi::RemainingArgs& columns, size_t key_count,
                            const std::vector<int64_t>& lengths,
                            const std::vector<double>& priorities,
                            const std::function<void(const std::vector<ColumnCopy>&)>& copy,
                            int64_t* keys) {
  InsertRows(table, rows, steps, ColumnSources(columns), key_count, lengths, priorities, copy,
             keys);
}

}  // namespace gearjax
