// Test-only hooks that make the GPU path's waits and locks visible without a
// GPU (issue 48's checks):
//  * An emulated GPU mapping whose frees probe the table lock: each free of
//    mapped memory (cudaFreeHost on a GPU, which waits for the whole device)
//    asks, from another thread, for the watched table's lock; a free made
//    while the lock is held is counted (a staged update's host function
//    queued on the stream may need that lock: a deadlock on a GPU).
//  * A GPU sample begun on a given stream, saying whether its draws read
//    the tree's mirror in GPU memory or the mapped host tree, and how many
//    copies into the mirrors it asked for.
#include <nanobind/nanobind.h>
#include <nanobind/stl/tuple.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/memory.h"
#include "core/table/registry.h"
#include "core/table/table.h"
#include "core/table/table_gpu.h"
#include "python/python_gil.h"
#include "testing/testing_module.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace gearjax::testing {
namespace {

std::mutex probes_mu;
std::weak_ptr<Table> watched;                  // the table whose lock frees must not hold
std::vector<std::future<void>> stuck_probes;  // probes still waiting for the lock
int frees_under_lock = 0;

// Asks for the watched table's lock from another thread; counts the free if
// the lock is not had within 200 ms (the probe finishes once it is).
void ProbeTheLock() {
  std::shared_ptr<Table> table;
  {
    std::lock_guard<std::mutex> guard(probes_mu);
    table = watched.lock();
  }
  if (table == nullptr) return;
  auto probe = std::async(std::launch::async, [table] { (void)table->waiting(); });
  if (probe.wait_for(std::chrono::milliseconds(200)) == std::future_status::ready) return;
  std::lock_guard<std::mutex> guard(probes_mu);
  ++frees_under_lock;
  stuck_probes.push_back(std::move(probe));
}

const MappedAllocator kLockProbingMapped{AllocateHostAsMapped, [](void* p) {
                                            ProbeTheLock();
                                            std::free(p);
                                          }};

}  // namespace

void DefineGpuWaitProbes(nb::module_ m) {
  m.def(
      "emulate_gpu_mapping_probing_frees",
      [](bool on) { ReplaceMapped(on, &kLockProbingMapped); }, "on"_a,
      "As emulate_gpu_mapping, but each free of the tables' mapped memory first asks for "
      "the watched table's lock from another thread (watch_frees, frees_under_lock).");
  m.def(
      "watch_frees",
      [](int64_t handle) {
        std::lock_guard<std::mutex> guard(probes_mu);
        watched = LookUpTable(handle);
        frees_under_lock = 0;
      },
      "handle"_a, "Probe the lock of this table at every free of mapped memory.");
  m.def(
      "frees_under_lock",
      []() {
        std::vector<std::future<void>> probes;
        int count;
        {
          std::lock_guard<std::mutex> guard(probes_mu);
          probes.swap(stuck_probes);
          count = frees_under_lock;
          frees_under_lock = 0;
          watched.reset();
        }
        python::ReleasedGil released;
        for (auto& probe : probes) probe.wait();
        return count;
      },
      "Frees of mapped memory made while the watched table's lock was held, since "
      "watch_frees (stops watching).");
  m.def(
      "begin_gpu_sample_on",
      [](int64_t handle, int64_t stream, double alpha) {
        std::shared_ptr<Table> table = LookUpTable(handle);
        SampleRequest request;
        request.batch = 1;
        request.strategy = Strategy::kPrioritized;
        request.alpha = alpha;
        request.window = 1;
        GpuSelection selection;
        MirrorCopies copies;
        uint64_t ticket;
        {
          python::ReleasedGil released;
          ticket = TableGpu(*table).BeginSample(request, &selection, &copies,
                                                reinterpret_cast<const void*>(stream));
        }
        // The mapped host tree is at a host address; a mirror in emulated
        // GPU memory is not (testing_module.cc: bit 62).
        const bool reads_mirror = EmulatedHost(const_cast<double*>(selection.tree.nodes)) !=
                                  selection.tree.nodes;
        RunMirrorCopies(copies);
        return std::make_tuple(ticket, copies.n, reads_mirror);
      },
      "handle"_a, "stream"_a, "alpha"_a,
      "A Prioritized GPU sample's ticket taken on `stream` (any nonzero integer, an "
      "identity): (ticket, copies into the mirrors it asked for, whether its draws read "
      "the mirror rather than the mapped host tree). end_gpu_sample returns the ticket.");
}

}  // namespace gearjax::testing
