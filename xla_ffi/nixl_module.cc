// gearjax._gearjax.NixlAgent (see nixl_module.h). Every call into NIXL runs
// with the GIL released; a read's spans come as uint64 arrays, checked here
// for shape and length before NIXL sees them.
#include "nixl_module.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "core/common.h"
#include "core/nixl_agent.h"
#include "core/one_sided.h"
#include "core/one_sided_nixl.h"
#include "core/one_sided_plan.h"
#include "core/slots.h"
#include "core/sum_tree.h"
#include "core/window.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace gearjax {
namespace {

using Spans = nb::ndarray<const uint64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Request = std::tuple<std::string, Spans, Spans, Spans>;

std::tuple<int, std::string> Read(nixl::Agent& agent, const std::vector<Request>& requests,
                                  double timeout, bool keep) {
  if (!(timeout > 0.0) || !std::isfinite(timeout)) {
    throw InvalidArgument("the read timeout must be a positive number of seconds");
  }
  std::vector<nixl::ReadRequest> native;
  native.reserve(requests.size());
  for (const auto& [peer, remote, local, sizes] : requests) {
    if (remote.shape(0) != local.shape(0) || remote.shape(0) != sizes.shape(0)) {
      throw InvalidArgument("a read request's remote addresses, local addresses and sizes "
                            "must have one entry per span");
    }
    native.push_back({peer, remote.data(), local.data(), sizes.data(), remote.shape(0), keep});
  }
  nixl::ReadResult result;
  {
    nb::gil_scoped_release release;
    result = agent.Read(native, timeout);
  }
  return {result.request, result.why};
}

std::vector<std::pair<std::string, nb::bytes>> Notifications(nixl::Agent& agent) {
  std::vector<std::pair<std::string, std::string>> got;
  {
    nb::gil_scoped_release release;
    got = agent.Notifications();
  }
  std::vector<std::pair<std::string, nb::bytes>> out;
  out.reserve(got.size());
  for (const auto& [sender, message] : got) {
    out.emplace_back(sender, nb::bytes(message.data(), message.size()));
  }
  return out;
}

// A shard's published layout, as gearjax/sharded/one_sided.py passes it:
// (peer, arena, column_offsets, slots, capacity, tree, tree_offsets,
// tree_nodes, uniform_root, max_length).
using LayoutTuple = std::tuple<std::string, uint64_t, std::vector<uint64_t>, uint64_t, int64_t,
                               uint64_t, std::vector<int64_t>, int64_t, uint64_t, int64_t>;
template <typename T>
using Out = nb::ndarray<T, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Bytes = nb::ndarray<uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

using Columns = std::vector<std::tuple<int64_t, nb::bytes>>;  // (step bytes, pad step)

// A request's fixed part as Python passes it, each pad checked to be one step.
one_sided::Request RequestOf(const std::vector<int>& numbers, int shard_shift,
                             const Columns& columns) {
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
  return request;
}

std::vector<one_sided::ShardLayout> ShardsOf(const std::vector<LayoutTuple>& layouts) {
  std::vector<one_sided::ShardLayout> shards;
  for (const auto& [peer, arena, column_offsets, slots, capacity, tree, tree_offsets, tree_nodes,
                    uniform_root, max_length] : layouts) {
    shards.push_back({peer, arena, column_offsets, slots, capacity, tree, tree_offsets,
                      tree_nodes, uniform_root, max_length});
  }
  return shards;
}

// The native one-sided sample (core/one_sided.h) into the given arrays;
// returns (index of the shard that failed or -1, why, round trips, descriptors).
std::tuple<int, std::string, int, int64_t> OneSidedSample(
    nixl::Agent* agent, const std::vector<LayoutTuple>& layouts, const std::vector<int>& numbers,
    int shard_shift, const Columns& columns, uint32_t seed0,
    uint32_t seed1, int64_t batch, int64_t window, bool pad_left, Out<int64_t> keys,
    Out<int32_t> start, Out<float> probability, Out<int64_t> table_size, Out<int32_t> valid,
    Out<int32_t> shard, const std::vector<Bytes>& column_outputs, double timeout) {
  one_sided::Request request = RequestOf(numbers, shard_shift, columns);
  request.seed[0] = seed0;
  request.seed[1] = seed1;
  request.batch = batch;
  request.window = window;
  request.pad_left = pad_left;
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
  nb::gil_scoped_release release;
  try {
    one_sided::Counts counts;
    if (agent != nullptr) {
      std::lock_guard<std::mutex> sampling(agent->sampling());
      one_sided::AgentReader reader(*agent, timeout);
      counts = one_sided::Sample(reader, shards, request, out);
    } else {
      one_sided::CopyReader reader;
      counts = one_sided::Sample(reader, shards, request, out);
    }
    return {-1, "", counts.round_trips, counts.descriptors};
  } catch (const one_sided::ShardUnavailable& e) {
    return {e.shard, e.what(), 0, 0};
  }
}

// A plan for compiled samples (core/one_sided_plan.h); returns its handle.
int64_t OneSidedPlan(nixl::Agent* agent, const std::vector<LayoutTuple>& layouts,
                     const std::vector<int>& numbers, int shard_shift,
                     const Columns& columns, int64_t batch,
                     int64_t window, bool pad_left, double timeout, bool skip_dead) {
  one_sided::Request request = RequestOf(numbers, shard_shift, columns);
  if (batch < 1 || window < 0) throw InvalidArgument("a one-sided plan needs rows");
  request.batch = batch;
  request.window = window;
  request.pad_left = pad_left;
  std::vector<one_sided::ShardLayout> shards = ShardsOf(layouts);
  return one_sided::RegisterPlan(std::make_shared<one_sided::Plan>(
      agent, std::move(shards), std::move(request), timeout, skip_dead));
}

}  // namespace

void DefineNixlAgent(nb::module_& m) {
  using nixl::Agent;
  nb::class_<Agent>(m, "NixlAgent",
                    "One process's NIXL agent through NIXL's C API (xla_ffi/core/nixl_agent.h).")
      .def(nb::init<const std::string&, const std::string&>(), "library"_a, "name"_a,
           nb::call_guard<nb::gil_scoped_release>())
      .def("register", &Agent::Register, "address"_a, "bytes"_a,
           nb::call_guard<nb::gil_scoped_release>())
      .def("deregister", &Agent::Deregister, "id"_a, nb::call_guard<nb::gil_scoped_release>())
      .def("metadata", [](Agent& a) {
        std::string md;
        {
          nb::gil_scoped_release release;
          md = a.Metadata();
        }
        return nb::bytes(md.data(), md.size());
      })
      .def("load_peer", [](Agent& a, nb::bytes metadata) {
        std::string md(static_cast<const char*>(metadata.data()), metadata.size());
        nb::gil_scoped_release release;
        return a.LoadPeer(md);
      }, "metadata"_a)
      .def("forget_peer", &Agent::ForgetPeer, "peer"_a,
           nb::call_guard<nb::gil_scoped_release>())
      .def("notify", [](Agent& a, const std::string& peer, nb::bytes message) {
        std::string body(static_cast<const char*>(message.data()), message.size());
        nb::gil_scoped_release release;
        a.Notify(peer, body);
      }, "peer"_a, "message"_a)
      .def("notifications", &Notifications)
      .def("read", &Read, "requests"_a, "timeout"_a, "keep"_a = false,
           "Reads every request's spans (peer, remote, local, sizes: uint64 arrays) at once; "
           "returns (-1, '') when all completed, else (index of the request that failed or "
           "ran past the timeout, why). keep: the same spans will be read again, so the agent "
           "keeps the transfer and posts it again (up to 8 kept transfers a peer).")
      .def("transfers", [](Agent& a) {
        const nixl::TransferCounts c = a.Transfers();
        nb::dict out;
        out["made"] = c.made;
        out["reposted"] = c.reposted;
        return out;
      }, "How many transfers reads made, and how many times a kept one was posted again.")
      .def("close", &Agent::Close, nb::call_guard<nb::gil_scoped_release>());
  m.def("one_sided_sample", &OneSidedSample, "agent"_a.none(), "layouts"_a, "numbers"_a,
        "shard_shift"_a, "columns"_a, "seed0"_a, "seed1"_a, "batch"_a, "window"_a,
        "pad_left"_a, "keys"_a, "start"_a, "probability"_a, "table_size"_a, "valid"_a,
        "shard"_a, "column_outputs"_a, "timeout"_a,
        "A one-sided sample in native code (xla_ffi/core/one_sided.h) into the given arrays, "
        "through `agent` (None: every shard in this process, copied); returns (index of the "
        "shard that failed or -1, why, round trips, descriptors).");
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
  }, "The slot record's and sum tree's layout (core/slots.h, core/sum_tree.h), which "
     "one-sided readers in Python decode.");
  m.def("sum_tree_children",
        [](nb::ndarray<const double, nb::ndim<2>, nb::c_contig, nb::device::cpu> lines,
           nb::ndarray<const double, nb::ndim<1>, nb::c_contig, nb::device::cpu> targets) {
          // SumTreeChild itself (core/sum_tree.h) over rows of lines read
          // one-sidedly: the readers' descent is the owner's, not a copy.
          const size_t n = targets.shape(0);
          if (lines.shape(0) != n || lines.shape(1) != static_cast<size_t>(kSumTreeFanout)) {
            throw InvalidArgument("sum_tree_children takes [n, 8] lines and n targets");
          }
          std::vector<int64_t> child(n);
          std::vector<double> remaining(n);
          std::vector<uint8_t> ok(n);
          for (size_t i = 0; i < n; ++i) {
            double t = targets.data()[i];
            const int c = SumTreeChild(lines.data() + i * kSumTreeFanout, &t);
            child[i] = c < 0 ? 0 : c;
            remaining[i] = t;
            ok[i] = c >= 0 && lines.data()[i * kSumTreeFanout + child[i]] > 0.0;
          }
          return std::make_tuple(child, remaining, ok);
        },
        "lines"_a, "targets"_a,
        "SumTreeChild for many lines: (child, target within it, whether a positive child "
        "was found), as lists.");
  m.def("one_sided_plan", &OneSidedPlan, "agent"_a.none(), "layouts"_a, "numbers"_a,
        "shard_shift"_a, "columns"_a, "batch"_a, "window"_a, "pad_left"_a, "timeout"_a,
        "skip_dead"_a,
        "Registers a plan for compiled one-sided samples (xla_ffi/core/one_sided_plan.h); "
        "returns its handle, the gearjax_one_sided_sample call's plan_handle. The agent must "
        "outlive it: close the plan first.");
  m.attr("one_sided_plan_max_columns") = one_sided::Plan::kMaxColumns;
  m.def("one_sided_plan_close", &one_sided::ClosePlan, "handle"_a,
        nb::call_guard<nb::gil_scoped_release>(),
        "Closes a plan (waiting for a sample in flight); returns the shards it lost.");
  m.def("one_sided_plan_lost", [](int64_t handle) { return one_sided::LookUpPlan(handle)->lost(); },
        "handle"_a, "The numbers of the shards a plan left out.");
}

}  // namespace gearjax
