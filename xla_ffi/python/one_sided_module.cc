// The one-sided sampling bindings (see one_sided_module.h). A sample runs
// with the GIL released through one of three readers: a NixlAgent's (no
// Python at all), a CopyReader (every shard in this process), or a
// PythonReader, whose transport is Python code (the verbs exchange, tests'
// loopback transports): the same sampler whatever moves the bytes.
#include "python/one_sided_module.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "core/common.h"
#include "core/nixl/nixl_agent.h"
#include "core/nixl/one_sided_nixl.h"
#include "core/one_sided/one_sided.h"
#include "core/one_sided/one_sided_plan.h"
#include "core/selectors/sum_tree.h"
#include "core/table/slots.h"
#include "core/window.h"
#include "python/python_gil.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace gearjax {
namespace {

// A shard's published layout, as gearjax/sharded/one_sided.py passes it:
// (peer, arena, column_offsets, slots, capacity, tree, tree_offsets,
// tree_nodes, uniform_root, max_length, stamps). peer "": this process's.
using LayoutTuple = std::tuple<std::string, uint64_t, std::vector<uint64_t>, uint64_t, int64_t,
                               uint64_t, std::vector<int64_t>, int64_t, uint64_t, int64_t,
                               uint64_t>;
template <typename T>
using Out = nb::ndarray<T, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Bytes = nb::ndarray<uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

using Columns = std::vector<std::tuple<int64_t, nb::bytes>>;  // (step bytes, pad step)

// A request's fixed part as Python passes it, each pad checked to be one step.
one_sided::Request RequestOf(const std::vector<int>& numbers, int shard_shift,
                             const Columns& columns, int64_t strategy, int64_t count) {
  one_sided::Request request;
  request.numbers = numbers;
  request.shard_shift = shard_shift;
  for (const auto& [step_bytes, pad] : columns) {
    const auto* p = static_cast<const uint8_t*>(pad.data());
    if (step_bytes < 1 || pad.size() != static_cast<size_t>(step_bytes)) {
      throw InvalidArgument("a column's pad must be one step");
    }
    request.columns.push_back({step_bytes, {p, p + pad.size()}});
  }
  if (strategy < 0 || strategy > INT32_MAX) {
    throw InvalidArgument("unknown sampling strategy " + std::to_string(strategy));
  }
  request.strategy = static_cast<Strategy>(strategy);
  request.count = count;
  return request;
}

std::vector<one_sided::ShardLayout> ShardsOf(const std::vector<LayoutTuple>& layouts) {
  std::vector<one_sided::ShardLayout> shards;
  for (const auto& [peer, arena, column_offsets, slots, capacity, tree, tree_offsets, tree_nodes,
                    uniform_root, max_length, stamps] : layouts) {
    shards.push_back({peer, arena, column_offsets, slots, capacity, tree, tree_offsets,
                      tree_nodes, uniform_root, max_length, stamps});
  }
  return shards;
}

nb::object Uint64Array(const std::vector<uint64_t>& values) {
  auto* data = new uint64_t[std::max<size_t>(values.size(), 1)];
  std::copy(values.begin(), values.end(), data);
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<uint64_t*>(p); });
  return nb::cast(nb::ndarray<nb::numpy, uint64_t, nb::ndim<1>>(data, {values.size()}, owner));
}

// A reader whose transport is Python: this process's shards (peer "") are
// copied here; the others' spans go, with the GIL, to
// transport.read([(shard number, remote, local, sizes), ...], fixed), uint64
// arrays, which returns (-1, "") or (the number of a shard that failed, why);
// staging buffers come from transport.staging(use, bytes), an address the
// transport keeps valid (and registered) until it asks for another.
class PythonReader : public one_sided::Reader {
 public:
  // `numbers`: each shard's number, as the request's (outlives the reader).
  PythonReader(nb::handle transport, const std::vector<int>& numbers)
      : transport_(transport), numbers_(numbers) {}

  nixl::ReadResult Read(const std::vector<one_sided::ShardLayout>& shards,
                        const std::vector<one_sided::ShardSpans>& spans, bool fixed) override {
    std::vector<size_t> remote;  // indices into spans
    for (size_t i = 0; i < spans.size(); ++i) {
      const one_sided::ShardSpans& s = spans[i];
      if (!shards[s.shard].peer.empty()) {
        if (!s.sizes.empty()) remote.push_back(i);
        continue;
      }
      for (size_t j = 0; j < s.sizes.size(); ++j) {
        std::memcpy(reinterpret_cast<void*>(s.local[j]),
                    reinterpret_cast<const void*>(s.remote[j]), s.sizes[j]);
      }
    }
    if (remote.empty()) return {};
    python::AcquiredGil gil;
    int failed = -1;
    std::string why;
    try {
      nb::list requests;
      for (size_t i : remote) {
        const one_sided::ShardSpans& s = spans[i];
        requests.append(nb::make_tuple(numbers_[s.shard], Uint64Array(s.remote),
                                       Uint64Array(s.local), Uint64Array(s.sizes)));
      }
      std::tie(failed, why) =
          nb::cast<std::tuple<int, std::string>>(transport_.attr("read")(requests, fixed));
    } catch (nb::python_error& e) {
      Keep(e);
    } catch (const std::exception& e) {  // a result of another type
      throw std::runtime_error(std::string("the one-sided transport's read returned no "
                                           "(shard, why): ") + e.what());
    }
    if (failed < 0) return {};
    for (size_t i : remote) {
      if (numbers_[spans[i].shard] == failed) return {static_cast<int>(i), why};
    }
    throw std::runtime_error("the one-sided transport named shard " + std::to_string(failed) +
                             " as failed, which this read did not ask for");
  }

  uint8_t* Staging(int use, size_t bytes) override {
    python::AcquiredGil gil;
    try {
      return reinterpret_cast<uint8_t*>(
          nb::cast<uintptr_t>(transport_.attr("staging")(use, bytes)));
    } catch (nb::python_error& e) {
      Keep(e);
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string("the one-sided transport's staging returned no "
                                           "address: ") + e.what());
    }
  }

  // Raises, with the GIL, the Python exception a callback raised, if one did.
  void RaiseKept() {
    if (!error_.is_valid()) return;
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error_.ptr())), error_.ptr());
    error_.reset();
    throw nb::python_error();
  }

 private:
  // Keeps a callback's exception (raised again by RaiseKept once the
  // sample is over) and ends the sample.
  [[noreturn]] void Keep(nb::python_error& e) {
    error_ = nb::borrow(e.value());
    throw std::runtime_error("the one-sided transport raised");
  }

  nb::handle transport_;
  const std::vector<int>& numbers_;
  nb::object error_;  // set and cleared with the GIL
};

// The native one-sided sample (core/one_sided/one_sided.h) into the given arrays;
// returns (index of the shard that failed or -1, why, round trips,
// descriptors). Other errors raise.
std::tuple<int, std::string, int, int64_t> OneSidedSample(
    nb::handle transport, const std::vector<LayoutTuple>& layouts,
    const std::vector<int>& numbers, int shard_shift, const Columns& columns, int64_t strategy,
    int64_t count, uint32_t seed0, uint32_t seed1, int64_t batch, int64_t window, bool pad_left,
    Out<int64_t> keys, Out<int32_t> start, Out<float> probability, Out<int64_t> table_size,
    Out<int32_t> valid, Out<int32_t> shard, const std::vector<Bytes>& column_outputs,
    double timeout, int64_t whole_read_bytes) {
  nixl::Agent* agent = nullptr;
  std::unique_ptr<PythonReader> python;
  if (nb::isinstance<nixl::Agent>(transport)) {
    agent = nb::cast<nixl::Agent*>(transport);
  } else if (!transport.is_none()) {
    if (!nb::hasattr(transport, "read") || !nb::hasattr(transport, "staging")) {
      throw InvalidArgument("a one-sided sample's transport is a NixlAgent, None, or an "
                            "object with read(requests, fixed) and staging(use, bytes)");
    }
    python = std::make_unique<PythonReader>(transport, numbers);
  }
  one_sided::Request request = RequestOf(numbers, shard_shift, columns, strategy, count);
  request.seed[0] = seed0;
  request.seed[1] = seed1;
  request.batch = batch;
  request.window = window;
  request.pad_left = pad_left;
  request.whole_read_bytes = whole_read_bytes;
  std::vector<one_sided::ShardLayout> shards = ShardsOf(layouts);
  if (shards.empty()) throw InvalidArgument("a one-sided sample needs a shard");
  const size_t rows = static_cast<size_t>(batch);
  const int64_t width = WindowWidth(window, shards[0].max_length);
  bool sized = batch >= 1 && keys.shape(0) == rows && start.shape(0) == rows &&
               probability.shape(0) == rows && table_size.shape(0) == rows &&
               valid.shape(0) == rows && shard.shape(0) == rows &&
               column_outputs.size() == request.columns.size();
  for (size_t c = 0; sized && c < column_outputs.size(); ++c) {
    sized = column_outputs[c].shape(0) >= rows * static_cast<size_t>(width) *
                                              static_cast<size_t>(request.columns[c].step_bytes);
  }
  if (!sized) throw InvalidArgument("the output arrays do not fit the batch");
  one_sided::Outputs out{keys.data(), start.data(), probability.data(), table_size.data(),
                         valid.data(), shard.data(), {}};
  for (const Bytes& c : column_outputs) out.columns.push_back(c.data());
  std::tuple<int, std::string, int, int64_t> result;
  std::exception_ptr failure;
  {
    python::ReleasedGil released;
    try {
      one_sided::Counts counts;
      if (agent != nullptr) {
        MutexLock sampling(agent->sampling());
        one_sided::AgentReader reader(*agent, timeout);
        counts = one_sided::Sample(reader, shards, request, out);
      } else if (python != nullptr) {
        counts = one_sided::Sample(*python, shards, request, out);
      } else {
        one_sided::CopyReader reader;
        counts = one_sided::Sample(reader, shards, request, out);
      }
      result = {-1, "", counts.round_trips, counts.descriptors};
    } catch (const one_sided::ShardUnavailable& e) {
      result = {e.shard, e.what(), 0, 0};
    } catch (...) {
      failure = std::current_exception();
    }
  }
  if (python != nullptr) python->RaiseKept();
  if (failure) std::rethrow_exception(failure);
  return result;
}

// A plan for compiled samples (core/one_sided/one_sided_plan.h); returns its handle.
int64_t OneSidedPlan(nixl::Agent* agent, const std::vector<LayoutTuple>& layouts,
                     const std::vector<int>& numbers, int shard_shift, const Columns& columns,
                     int64_t strategy, int64_t count, int64_t batch, int64_t window,
                     bool pad_left, double timeout, bool skip_dead) {
  one_sided::Request request = RequestOf(numbers, shard_shift, columns, strategy, count);
  if (batch < 1 || window < 0) throw InvalidArgument("a one-sided plan needs rows");
  request.batch = batch;
  request.window = window;
  request.pad_left = pad_left;
  std::vector<one_sided::ShardLayout> shards = ShardsOf(layouts);
  return one_sided::RegisterPlan(std::make_shared<one_sided::Plan>(
      agent, std::move(shards), std::move(request), timeout, skip_dead));
}

}  // namespace

void DefineOneSided(nb::module_& m) {
  m.def("one_sided_sample", &OneSidedSample, "transport"_a.none(), "layouts"_a, "numbers"_a,
        "shard_shift"_a, "columns"_a, "strategy"_a, "count"_a, "seed0"_a, "seed1"_a,
        "batch"_a, "window"_a, "pad_left"_a, "keys"_a, "start"_a, "probability"_a,
        "table_size"_a, "valid"_a, "shard"_a, "column_outputs"_a, "timeout"_a,
        "whole_read_bytes"_a = one_sided::kWholeReadBytes,
        "A one-sided sample in native code (xla_ffi/core/one_sided/one_sided.h) into the given arrays, "
        "through `transport`: a NixlAgent, None (every shard in this process, copied), or a "
        "Python transport with read(requests, fixed) and staging(use, bytes) (see "
        "one_sided_module.cc); returns (index of the shard that failed or -1, why, round "
        "trips, descriptors).");
  m.attr("one_sided_whole_read_bytes") = one_sided::kWholeReadBytes;
  m.attr("one_sided_stagings") = static_cast<int>(one_sided::kNumStagings);
  m.def("one_sided_plan", &OneSidedPlan, "agent"_a.none(), "layouts"_a, "numbers"_a,
        "shard_shift"_a, "columns"_a, "strategy"_a, "count"_a, "batch"_a, "window"_a,
        "pad_left"_a, "timeout"_a, "skip_dead"_a,
        "Registers a plan for compiled one-sided samples (xla_ffi/core/one_sided/one_sided_plan.h); "
        "returns its handle, the gearjax_one_sided_sample call's plan_handle. The agent must "
        "outlive it: close the plan first.");
  m.attr("one_sided_plan_max_columns") = one_sided::Plan::kMaxColumns;
  m.def("one_sided_plan_close", &one_sided::ClosePlan, "handle"_a,
        nb::call_guard<python::ReleasedGil>(),
        "Closes a plan (waiting for a sample in flight); returns the shards it lost.");
  m.def("one_sided_plan_lost",
        [](int64_t handle) { return one_sided::LookUpPlan(handle)->lost(); }, "handle"_a,
        "The numbers of the shards a plan left out.");
  m.def("slot_layout", []() {
    // What one-sided readers read of an owner's memory, from the core itself.
    nb::dict d;
    d["sum_tree_fanout"] = kSumTreeFanout;
    d["slot_bytes"] = sizeof(SlotInfo);
    d["live_state"] = static_cast<int>(SlotState::kLive);
    d["key_offset"] = offsetof(SlotInfo, key);
    d["length_offset"] = offsetof(SlotInfo, length);
    d["priority_offset"] = offsetof(SlotInfo, priority);
    d["pins_offset"] = offsetof(SlotInfo, pins);
    d["state_offset"] = offsetof(SlotInfo, state);
    return d;
  }, "The slot record's and sum tree's layout (core/table/slots.h, core/selectors/sum_tree.h), which "
     "one-sided readers in Python decode.");
}

}  // namespace gearjax
