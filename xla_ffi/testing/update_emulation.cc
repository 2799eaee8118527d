// Test-only hooks for GPU priority updates (core/gpu/update_block.h): the CUDA
// handler's path with the kernel's phases run on the CPU, thread by thread,
// so the update kernel's code is checked against Table::UpdatePriorities on
// machines without a GPU, and the protocol that keeps host writers out of
// the priorities while a kernel may run is tested with the kernel held back.
#include <nanobind/ndarray.h>
#include <nanobind/stl/unique_ptr.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "core/decode.h"
#include "core/gpu/gpu_completions.h"
#include "core/gpu/update_block.h"
#include "core/table/registry.h"
#include "core/table/table.h"
#include "core/table/table_gpu.h"
#include "python/python_gil.h"
#include "testing/array_formats.h"
#include "testing/testing_module.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace gearjax::testing {
namespace {

// An update begun as the CUDA handler begins it (ticket taken, table part
// filled) whose "kernel" runs when the test says: run() hands the ticket to
// the device and runs the phases, the last reporting through the ring.
class PendingGpuUpdate {
 public:
  PendingGpuUpdate(std::shared_ptr<Table> table, uint64_t ticket, const GpuUpdate& update,
                   const MirrorCopies& copies, std::vector<uint8_t> keys,
                   std::vector<uint8_t> priorities)
      : table_(std::move(table)), ticket_(ticket), update_(update), copies_(copies),
        keys_(std::move(keys)), priorities_(std::move(priorities)) {
    for (int32_t k = 0; k < update_.trees; ++k) {
      update_.tree[k].nodes = EmulatedHost(update_.tree[k].nodes);
    }
    update_.keys = keys_.data();
    update_.priorities = priorities_.data();
    update_.updated = &updated_;
    update_.completion = TableGpu(*table_).CompletionFor(ticket_, GpuCompletions::kEmulated);
    // As the handler does once the kernel is enqueued (UpdateTicket::HandToDevice).
    TableGpu(*table_).HandToDevice(ticket_);
    TableGpu(*table_).UpdateEnqueued(ticket_);
  }

  int32_t Run(int64_t threads) {
    if (ran_) throw InvalidArgument("this update has run");
    if (threads < 1) throw InvalidArgument("a block has at least one thread");
    ran_ = true;
    std::vector<long long> shared(GpuUpdateSharedBytes(update_.n) / sizeof(long long) + 1);
    {
      python::ReleasedGil released;
      RunMirrorCopies(copies_);  // enqueued before the kernel, on its stream
      EmulateGpuUpdate(update_, shared.data(), threads);
    }
    return updated_;
  }
  uint64_t ticket() const { return ticket_; }

 private:
  std::shared_ptr<Table> table_;
  uint64_t ticket_;
  GpuUpdate update_;
  MirrorCopies copies_;
  std::vector<uint8_t> keys_, priorities_;
  int32_t updated_ = -2;
  bool ran_ = false;
};

std::vector<uint8_t> Bytes(const AnyArray& a) {
  const auto* data = static_cast<const uint8_t*>(a.data());
  return std::vector<uint8_t>(data, data + a.nbytes());
}

// The handler's steps up to the launch: look-up (raising a deferred error),
// formats and sizes, TableGpu::BeginUpdate. None when the table stages the update.
std::unique_ptr<PendingGpuUpdate> BeginGpuUpdate(int64_t handle, AnyArray keys,
                                                 AnyArray priorities, int64_t stream) {
  std::shared_ptr<Table> table = LookUpTable(handle);
  const KeyFormat key_format = KeyFormatOf(keys);
  const PriorityFormat priority_format = PriorityFormatOf(priorities);
  if (keys.shape(0) != priorities.shape(0)) {
    throw InvalidArgument("keys and priorities differ in size");
  }
  GpuUpdate update;
  MirrorCopies copies;
  uint64_t ticket;
  {
    python::ReleasedGil released;
    TableGpu(*table).UseCompletions(nullptr, GpuCompletions::kEmulated);
    ticket = TableGpu(*table).BeginUpdate(reinterpret_cast<const void*>(stream),
                                          static_cast<int64_t>(keys.shape(0)), &update, &copies);
  }
  if (ticket == 0) return nullptr;
  update.key_format = key_format;
  update.priority_format = priority_format;
  update.n = static_cast<int64_t>(keys.shape(0));
  return std::make_unique<PendingGpuUpdate>(std::move(table), ticket, update, copies,
                                            Bytes(keys), Bytes(priorities));
}

}  // namespace

void DefineUpdateEmulation(nb::module_ m) {
  nb::class_<PendingGpuUpdate>(m, "PendingGpuUpdate")
      .def("run", &PendingGpuUpdate::Run, "threads"_a,
           "Runs the update kernel's phases with `threads` threads on the CPU; returns what "
           "the kernel writes as the result (the count, or -1).")
      .def_prop_ro("ticket", &PendingGpuUpdate::ticket);
  m.def("begin_gpu_update", &BeginGpuUpdate, "handle"_a, "keys"_a, "priorities"_a,
        "stream"_a = 1,
        "A priority update begun as the CUDA handler begins it on `stream` (any integer, "
        "an identity): a PendingGpuUpdate whose run() is the kernel, or None where the "
        "table stages the update instead (TableGpu::BeginUpdate). use_gpu_mapping's tables "
        "only.");
}

}  // namespace gearjax::testing
