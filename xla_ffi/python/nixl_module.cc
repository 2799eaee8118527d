// gearjax._gearjax.NixlAgent (see nixl_module.h). Every call into NIXL runs
// with the GIL released; a read's spans come as uint64 arrays, checked here
// for shape and length before NIXL sees them.
#include "python/nixl_module.h"

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
#include "core/nixl/nixl_agent.h"
#include "python/python_gil.h"

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
    python::ReleasedGil released;
    result = agent.Read(native, timeout);
  }
  return {result.request, result.why};
}

std::vector<std::pair<std::string, nb::bytes>> Notifications(nixl::Agent& agent) {
  std::vector<std::pair<std::string, std::string>> got;
  {
    python::ReleasedGil released;
    got = agent.Notifications();
  }
  std::vector<std::pair<std::string, nb::bytes>> out;
  out.reserve(got.size());
  for (const auto& [sender, message] : got) {
    out.emplace_back(sender, nb::bytes(message.data(), message.size()));
  }
  return out;
}

}  // namespace

void DefineNixlAgent(nb::module_& m) {
  using nixl::Agent;
  nb::class_<Agent>(m, "NixlAgent",
                    "One process's NIXL agent through NIXL's C API (xla_ffi/core/nixl/nixl_agent.h).")
      .def(nb::init<const std::string&, const std::string&>(), "library"_a, "name"_a,
           nb::call_guard<python::ReleasedGil>())
      .def("register", &Agent::Register, "address"_a, "bytes"_a,
           nb::call_guard<python::ReleasedGil>())
      .def("deregister", &Agent::Deregister, "id"_a, nb::call_guard<python::ReleasedGil>())
      .def("metadata", [](Agent& a) {
        std::string md;
        {
          python::ReleasedGil released;
          md = a.Metadata();
        }
        return nb::bytes(md.data(), md.size());
      })
      .def("load_peer", [](Agent& a, nb::bytes metadata) {
        std::string md(static_cast<const char*>(metadata.data()), metadata.size());
        python::ReleasedGil released;
        return a.LoadPeer(md);
      }, "metadata"_a)
      .def("forget_peer", &Agent::ForgetPeer, "peer"_a,
           nb::call_guard<python::ReleasedGil>())
      .def("notify", [](Agent& a, const std::string& peer, nb::bytes message) {
        std::string body(static_cast<const char*>(message.data()), message.size());
        python::ReleasedGil released;
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
      .def("close", &Agent::Close, nb::call_guard<python::ReleasedGil>());
}

}  // namespace gearjax
