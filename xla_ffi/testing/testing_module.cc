// Test-only hooks, built into the extension only with GEARJAX_TESTING=ON
// (scripts/test.sh): they let the GPU code paths run on machines without a
// GPU.
//  * Emulated GPU mapping: tables created while it is on get ordinary host
//    memory that claims to be GPU-mapped at its own address, so the GPU
//    selection's code, which only reads "device" addresses, runs on the CPU.
//    On a machine with a GPU the emulation replaces the real hooks while it
//    is on (and restores them after); the CUDA handlers refuse its tables.
//  * Emulated GPU memory: placement "device" gets real host memory handed
//    out at an address with bit 62 set, which is not canonical on x86-64 or
//    AArch64, so any host code that dereferences a "device" address instead of
//    going through the copy hooks crashes rather than passing by accident.
//  * The GPU selection (select_block.h) and gather (gather_block.h) code run
//    on the CPU for a table given by handle, and the GPU-sample tickets taken
//    and returned by hand (tests of the slot protocol).
//  * A GPU priority update staged and applied as the CUDA handler's host
//    functions do it (staged_update.h), or applied by the update kernel's
//    code (update_emulation.cc).
#include "testing/testing_module.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "core/gpu/completion_block.h"
#include "core/gpu/gather_plan.h"
#include "core/gpu/gpu_completions.h"
#include "core/gpu/sample_block.h"
#include "core/gpu/select_block.h"
#include "core/gpu/staged_update.h"
#include "core/memory.h"
#include "core/table/registry.h"
#include "core/table/table.h"
#include "core/table/table_gpu.h"
#include "core/window.h"
#include "python/new_array.h"
#include "python/python_gil.h"
#include "testing/array_formats.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace gearjax::testing {
namespace {

constexpr uintptr_t kEmulatedDeviceBit = uintptr_t{1} << 62;
size_t emulated_free_bytes = 0;
std::atomic<bool> emulated_copy_fails{false};  // copies into "device" memory throw

// The host address behind an emulated device address.
uint8_t* ToHost(const void* device) {
  return reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(device) & ~kEmulatedDeviceBit);
}

// Four emulated GPUs: each thread's current one (0 at first), and which was
// current at each allocation and copy (emulated_gpu_log).
constexpr int kEmulatedGpus = 4;
thread_local int emulated_current_gpu = 0;
std::mutex emulated_log_mu;
std::vector<std::tuple<std::string, int>> emulated_log;

void LogOnGpu(const char* what) {
  std::lock_guard<std::mutex> guard(emulated_log_mu);
  emulated_log.emplace_back(what, emulated_current_gpu);
}

const DeviceMemory kEmulatedDeviceMemory{
    [](size_t bytes) -> void* {
      LogOnGpu("allocate");
      void* p = std::malloc(bytes);
      return p == nullptr ? nullptr
                          : reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) | kEmulatedDeviceBit);
    },
    [](void* device) { std::free(ToHost(device)); },
    [](void* dst, const void* src, size_t n) {
      LogOnGpu("copy_in");
      if (emulated_copy_fails.load()) throw std::runtime_error("emulated GPU copy failure");
      std::memcpy(ToHost(dst), src, n);
    },
    [](void* dst, const void* src, size_t n) {
      LogOnGpu("copy_out");
      std::memcpy(dst, ToHost(src), n);
    },
    []() { return emulated_free_bytes; },
    []() { return emulated_current_gpu; },
    [](int gpu) {
      if (gpu < 0 || gpu >= kEmulatedGpus) return false;
      emulated_current_gpu = gpu;
      return true;
    }};

const MappedAllocator kHostAsMapped{AllocateHostAsMapped, [](void* p) { std::free(p); }};

// A hook an emulation replaced (a real GPU's, or none), put back when it is
// switched off: never none where a GPU's were.
template <typename Hook, const Hook* (*Get)(), void (*Set)(const Hook*)>
class ReplacedHook {
 public:
  void Replace(bool on, const Hook* replacement) {
    if (on) {
      if (!replaced_) saved_ = Get();
      replaced_ = true;
      Set(replacement);
    } else if (replaced_) {
      Set(saved_);
      replaced_ = false;
    }
  }

 private:
  const Hook* saved_ = nullptr;
  bool replaced_ = false;
};

ReplacedHook<MappedAllocator, GetMappedAllocator, SetMappedAllocator> mapped_hook;
ReplacedHook<DeviceMemory, GetDeviceMemory, SetDeviceMemory> device_hook;

void ReplaceDeviceMemory(bool on, const DeviceMemory* replacement) {
  device_hook.Replace(on, replacement);
}

std::shared_ptr<Table> Find(int64_t handle) { return LookUpTable(handle); }

// The stream identity the emulated sample handlers pass (one stream).
const void* const kEmulatedStream = reinterpret_cast<const void*>(1);

// The completion ring's view an emulated "kernel" reports through: the
// emulation's block counts, in host memory.
CompletionView EmulatedView(Table& table, uint64_t ticket) {
  return TableGpu(table).CompletionFor(ticket, GpuCompletions::kEmulated);
}

SampleRequest Request(int64_t batch, int strategy, double alpha, int64_t count, int64_t window,
                      int cut = 0, bool replace = true) {
  if (cut < 0 || cut >= kNumCuts) throw InvalidArgument("unknown cut");
  return {static_cast<Strategy>(strategy), alpha, count, batch, window, static_cast<Cut>(cut),
          replace};
}

// An emulated sample's results, as NumPy arrays its SampleOutputs write into:
// returned as (keys, start, probability, table_size, valid, [column bytes as
// uint8 [batch, width * step_bytes]]).
struct EmulatedOutputs {
  EmulatedOutputs(const Table& table, int64_t batch, int64_t width)
      : b(static_cast<size_t>(batch)), keys({b}), table_size({b}), start({b}), valid({b}),
        probability({b}) {
    out = {keys.data, start.data, probability.data, table_size.data, valid.data, {}};
    for (int c = 0; c < table.num_columns(); ++c) {
      NewArray<uint8_t> column({b, static_cast<size_t>(width * table.step_bytes(c))});
      columns.append(column.array);
      out.columns.push_back(column.data);
    }
  }
  nb::tuple Results() const {
    return nb::make_tuple(keys.array, start.array, probability.array, table_size.array,
                          valid.array, columns);
  }

  size_t b;
  NewArray<int64_t> keys, table_size;
  NewArray<int32_t> start, valid;
  NewArray<float> probability;
  nb::list columns;
  SampleOutputs out;
};

// Samples like the CPU handler but gathers with the GPU kernel's block code
// run on the CPU (EmulateGather): (keys, start, probability, table_size,
// valid, [column bytes as uint8 [batch, width * step_bytes]]).
nb::tuple EmulateGpuSample(int64_t handle, std::tuple<uint32_t, uint32_t> seed, int64_t batch,
                           int strategy, double alpha, int64_t count, int64_t window,
                           bool pad_left, int64_t threads, int cut, bool replace,
                           bool device_completion) {
  if (batch < 1 || threads < 1) throw InvalidArgument("batch and threads must be >= 1");
  std::shared_ptr<Table> table = Find(handle);
  const int64_t width = WindowWidth(window, table->spec().max_length);
  EmulatedOutputs results(*table, batch, width);
  const SampleOutputs& out = results.out;
  const uint32_t words[2] = {std::get<0>(seed), std::get<1>(seed)};
  std::vector<Draw> draws(batch);
  // Plan first (it checks the column limit) so nothing is pinned on error.
  // Host tables gather from their host memory, device tables from behind
  // their emulated addresses.
  const uint8_t* arena = table->on_device() ? ToHost(table->device_arena()) : table->arena_data();
  GatherParams params = PlanGather(*table, draws.data(), batch, width, pad_left, out, arena);
  const uint64_t ticket =
      table->Select(Request(batch, strategy, alpha, count, window, cut, replace), words,
                    draws.data());
  if (device_completion) {
    // As the CUDA handler: the gather reports the ticket through the ring,
    // handed over before the "kernel" runs.
    params.completion = EmulatedView(*table, ticket);
    TableGpu(*table).HandToDevice(ticket);
    EmulateGather(params, threads);
  } else {
    EmulateGather(params, threads);
    table->EndSample(ticket);
  }
  return results.Results();
}

// The fused GPU sample (core/gpu/sample_block.h) run on the CPU as the CUDA
// handler runs it for Uniform, Timestep and Prioritized: TableGpu::BeginSample, the
// kernel's blocks (each selecting its row once and copying all of it), the
// ticket back through the completion ring or by hand. Same results as
// EmulateGpuSample. Refuses a batch whose windows the handler would not fuse.
nb::tuple EmulateFusedGpuSample(int64_t handle, std::tuple<uint32_t, uint32_t> seed,
                                int64_t batch, int strategy, double alpha, int64_t window,
                                bool pad_left, int64_t threads, int cut,
                                bool device_completion) {
  if (batch < 1 || threads < 1) throw InvalidArgument("batch and threads must be >= 1");
  std::shared_ptr<Table> table = Find(handle);
  const int64_t width = WindowWidth(window, table->spec().max_length);
  EmulatedOutputs results(*table, batch, width);
  const SampleOutputs& out = results.out;
  const uint8_t* arena = table->on_device() ? ToHost(table->device_arena()) : table->arena_data();
  GatherParams params = PlanGather(*table, nullptr, batch, width, pad_left, out, arena);
  if (!FusesSample(params)) {
    throw InvalidArgument("these windows do not fit one gather part: the handler would not fuse");
  }
  GpuSelection selection;
  MirrorCopies copies;
  const uint64_t ticket = TableGpu(*table).BeginSample(
      Request(batch, strategy, alpha, 0, window, cut), &selection, &copies, kEmulatedStream);
  RunMirrorCopies(copies);
  selection.tree.nodes = EmulatedHost(const_cast<double*>(selection.tree.nodes));
  const uint32_t words[2] = {std::get<0>(seed), std::get<1>(seed)};
  if (device_completion) {
    params.completion = EmulatedView(*table, ticket);
    TableGpu(*table).HandToDevice(ticket);
    EmulateFusedSample(selection, words, window, params, threads);
  } else {
    EmulateFusedSample(selection, words, window, params, threads);
    table->EndSample(ticket);
  }
  return results.Results();
}

// Runs the GPU selection's row code on the CPU, reading the selection state
// through its "device" addresses (with the emulated mapping, the host ones):
// (keys, start, probability, table_size, slots, lengths, valid) for the same
// seed.
nb::tuple EmulateGpuSelect(int64_t handle, std::tuple<uint32_t, uint32_t> seed, int64_t batch,
                           int strategy, double alpha, int64_t count, int64_t window, int cut) {
  if (batch < 1) throw InvalidArgument("batch must be >= 1");
  std::shared_ptr<Table> table = Find(handle);
  const size_t b = static_cast<size_t>(batch);
  NewArray<int64_t> keys({b}), table_size({b}), slots({b}), lengths({b});
  NewArray<int32_t> start({b}), valid({b});
  NewArray<float> probability({b});
  GpuSelection selection;
  MirrorCopies copies;
  const uint64_t ticket =
      TableGpu(*table).BeginSample(Request(batch, strategy, alpha, count, window, cut),
                                   &selection, &copies, kEmulatedStream);
  RunMirrorCopies(copies);
  selection.tree.nodes = EmulatedHost(const_cast<double*>(selection.tree.nodes));
  const uint32_t words[2] = {std::get<0>(seed), std::get<1>(seed)};
  for (int64_t i = 0; i < batch; ++i) {
    const Draw d = SelectRow(selection, words, window, i);
    keys.data[i] = d.key;
    start.data[i] = static_cast<int32_t>(d.start);
    probability.data[i] = d.probability;
    table_size.data[i] = d.table_size;
    slots.data[i] = d.slot;
    lengths.data[i] = d.length;
    valid.data[i] = static_cast<int32_t>(d.valid);
  }
  table->EndSample(ticket);
  return nb::make_tuple(keys.array, start.array, probability.array, table_size.array,
                        slots.array, lengths.array, valid.array);
}

// What the CUDA priority-update handler does, with its copies as memcpy and
// its two host functions run here, in order, inside a stream-callback scope
// (core/gpu/staged_update.h): looks the table up (raising its deferred error),
// checks types and sizes, stages, applies, recycles; returns the count.
int32_t StagedUpdateLikeTheGpu(int64_t handle, AnyArray keys, AnyArray priorities) {
  std::shared_ptr<Table> table = Find(handle);
  const KeyFormat key_format = KeyFormatOf(keys);
  const PriorityFormat priority_format = PriorityFormatOf(priorities);
  if (keys.shape(0) != priorities.shape(0)) {
    throw InvalidArgument("keys and priorities differ in size");
  }
  const int64_t n = static_cast<int64_t>(keys.shape(0));
  StagedUpdate* update = StagedUpdate::Take(table, key_format, priority_format, n);
  std::memcpy(update->keys(), keys.data(), keys.nbytes());
  std::memcpy(update->priorities(), priorities.data(), priorities.nbytes());
  int32_t count;
  {
    python::ReleasedGil released;
    StreamCallbackScope callback;
    update->Apply();
    count = *update->count();
    StagedUpdate::Recycle(update);
  }
  return count;
}

}  // namespace

void* AllocateHostAsMapped(size_t bytes, void** device) {
  void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);  // like cudaHostAlloc
  *device = p;
  return p;
}

void ReplaceMapped(bool on, const MappedAllocator* replacement) {
  mapped_hook.Replace(on, replacement);
}

double* EmulatedHost(double* device) {
  return reinterpret_cast<uintptr_t>(device) & kEmulatedDeviceBit
             ? reinterpret_cast<double*>(ToHost(device))
             : device;
}

void RunMirrorCopies(MirrorCopies copies) {
  for (int32_t k = 0; k < copies.n; ++k) copies.copy[k].to = EmulatedHost(copies.copy[k].to);
  EmulateMirrorCopies(copies);
}

namespace {

// GPU memory emulated on the CPU: mapped host memory, device memory, the log
// of what was allocated and copied where.
void DefineEmulatedMemory(nb::module_& m) {
  m.def(
      "emulate_gpu_mapping", [](bool on) { ReplaceMapped(on, &kHostAsMapped); }, "on"_a,
      "Tables created while on get host memory that claims to be GPU-mapped (no real GPU "
      "kernel accepts them: TableGpu::CheckReachable); off restores the previous hooks.");
  m.def(
      "hide_gpu_mapping", [](bool on) { ReplaceMapped(on, nullptr); }, "on"_a,
      "Tables created while on get plain host memory, as without a GPU; off restores the "
      "previous hooks.");
  m.def(
      "emulate_device_memory",
      [](bool on, size_t free_bytes, bool copies_fail) {
        emulated_free_bytes = free_bytes;
        emulated_copy_fails.store(copies_fail);
        ReplaceDeviceMemory(on, &kEmulatedDeviceMemory);
      },
      "on"_a, "free_bytes"_a = 0, "copies_fail"_a = false,
      "Tables created while on may take placement 'device' in emulated GPU memory reporting "
      "`free_bytes` free; with `copies_fail`, every copy into it throws.");
  m.def(
      "emulated_gpu_log",
      []() {
        std::lock_guard<std::mutex> guard(emulated_log_mu);
        nb::list out;
        for (const auto& [what, gpu] : emulated_log) out.append(nb::make_tuple(what, gpu));
        emulated_log.clear();
        out.append(nb::make_tuple("current", emulated_current_gpu));
        return out;
      },
      "(what, GPU current then) of each allocation and copy of emulated GPU memory since "
      "the last call (of four emulated GPUs), then ('current', this thread's GPU now).");
}

// A GPU sample's steps as the CUDA handlers take them (TableGpu), and the
// kernels' emulations.
void DefineGpuSamples(nb::module_& m) {
  m.def(
      "begin_gpu_sample",
      [](int64_t handle, int64_t batch, int strategy, double alpha, int64_t count, int64_t window,
         int cut, bool replace, int64_t stream) {
        std::shared_ptr<Table> table = Find(handle);
        const SampleRequest request = Request(batch, strategy, alpha, count, window, cut, replace);
        GpuSelection selection;
        python::ReleasedGil released;
        if (stream == 0) return TableGpu(*table).BeginSample(request, &selection);
        MirrorCopies copies;
        const uint64_t ticket = TableGpu(*table).BeginSample(
            request, &selection, &copies, reinterpret_cast<const void*>(stream));
        RunMirrorCopies(copies);
        return ticket;
      },
      "handle"_a, "batch"_a, "strategy"_a, "alpha"_a = 0.0, "count"_a = 0, "window"_a = 1,
      "cut"_a = 0, "replace"_a = true, "stream"_a = 0,
      "Takes a GPU sample's ticket (end_gpu_sample returns it). With a stream (any "
      "nonzero integer, an identity) the handler's mirror copies are asked for and run.");
  m.def(
      "tree_mirrors",
      [](int64_t handle) {
        nb::list out;
        for (const TableGpu::MirroredTree& tree : TableGpu(*Find(handle)).MirroredTrees()) {
          NewArray<double> host({tree.host.size()}), mirror({tree.mirror.size()});
          std::copy(tree.host.begin(), tree.host.end(), host.data);
          std::copy(tree.mirror.begin(), tree.mirror.end(), mirror.data);
          out.append(nb::make_tuple(host.array, mirror.array));
        }
        return out;
      },
      "handle"_a,
      "(host nodes, mirror nodes) of every tree with a copy in GPU memory (Timestep's "
      "first, then each Prioritized alpha's).");
  m.def(
      "end_gpu_sample",
      [](int64_t handle, uint64_t ticket) { Find(handle)->EndSample(ticket); }, "handle"_a,
      "ticket"_a);
  m.def(
      "waits_for_staged_updates",
      [](int64_t handle, int strategy, double alpha) {
        const SampleRequest request = Request(1, strategy, alpha, 0, 1, 0, true);
        return TableGpu(*Find(handle)).WaitsForStagedUpdates(request);
      },
      "handle"_a, "strategy"_a, "alpha"_a = 0.0,
      "Whether the CUDA handler would wait for the stream before this GPU sample "
      "(TableGpu::WaitsForStagedUpdates).");
  m.def("staged_update", &StagedUpdateLikeTheGpu, "handle"_a, "keys"_a, "priorities"_a,
        "A priority update as the CUDA handler stages and applies it; returns the count.");
  m.def("emulate_gpu_select", &EmulateGpuSelect, "handle"_a, "seed"_a, "batch"_a, "strategy"_a,
        "alpha"_a, "count"_a, "window"_a, "cut"_a = 0);
  m.def("emulate_gpu_sample", &EmulateGpuSample, "handle"_a, "seed"_a, "batch"_a, "strategy"_a,
        "alpha"_a, "count"_a, "window"_a, "pad_left"_a, "threads"_a, "cut"_a = 0,
        "replace"_a = true, "device_completion"_a = false,
        "With device_completion, the ticket comes back as the CUDA handler's does: handed "
        "to the device before the emulated gather runs, written into the completion ring by "
        "its last block (use_gpu_completions first).");
  m.def("emulate_fused_gpu_sample", &EmulateFusedGpuSample, "handle"_a, "seed"_a, "batch"_a,
        "strategy"_a, "alpha"_a, "window"_a, "pad_left"_a, "threads"_a, "cut"_a = 0,
        "device_completion"_a = false);
}

// The completion ring: tickets handed to the device and reported by the
// emulated kernels' last blocks.
void DefineCompletionRing(nb::module_& m) {
  m.def(
      "use_gpu_completions",
      [](int64_t handle) {
        TableGpu(*Find(handle)).UseCompletions(nullptr, GpuCompletions::kEmulated);
      },
      "handle"_a,
      "Gives the table its GPU completion ring (block counts beside it), as the CUDA "
      "handlers do on their first sample.");
  m.def(
      "hand_to_device",
      [](int64_t handle, uint64_t ticket) { TableGpu(*Find(handle)).HandToDevice(ticket); },
      "handle"_a, "ticket"_a,
      "Hands a ticket to the device: it comes back when complete_blocks reports it.");
  m.def(
      "kernel_report",
      [](int64_t handle, uint64_t ticket, int64_t of) {
        if (of < 1) throw InvalidArgument("a kernel has at least one block");
        // The view as the kernel gets it at launch: it reports with no
        // lookup, also after the table is closed.
        const CompletionView view = EmulatedView(*Find(handle), ticket);
        return nb::cpp_function([view, of](int64_t blocks) {
          if (blocks < 0 || blocks > of) throw InvalidArgument("need 0 <= blocks <= of");
          for (int64_t b = 0; b < blocks; ++b) CompleteBlock(view, static_cast<uint64_t>(of));
        }, "blocks"_a);
      },
      "handle"_a, "ticket"_a, "of"_a,
      "The end of the kernel that reports `ticket`, with `of` blocks: calling the result "
      "with n runs CompleteBlock for n more of its blocks (the last writes the ring).");
  m.def(
      "completion_ring",
      [](int64_t handle, uint64_t ticket) {
        const CompletionView view = EmulatedView(*Find(handle), ticket);
        const uint64_t place = ticket % view.size;
        return nb::make_tuple(view.done[place], view.blocks[place], view.size);
      },
      "handle"_a, "ticket"_a, "(what the ring holds in ticket's place, its block count, size).");
  m.def(
      "tickets_on_device",
      [](int64_t handle) { return TableGpu(*Find(handle)).TicketsOnDevice(); }, "handle"_a,
      "Tickets handed to the device that the ring has not reported yet.");
}

}  // namespace

void DefineModule(nb::module_ m) {
  DefineEmulatedMemory(m);
  DefineGpuSamples(m);
  DefineCompletionRing(m);
  DefineUpdateEmulation(m);
  DefineGpuWaitProbes(m);
  DefineCrashReport(m);
}

}  // namespace gearjax::testing
