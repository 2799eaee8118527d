// The Python extension `gearjax._gearjax`: the native table object the Python
// layer drives (insert, priorities, stats, checkpoint access) and capsules of
// the FFI handlers for jax.ffi.register_ffi_target.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "core/gather_plan.h"
#include "core/random.h"
#include "core/registry.h"
#include "core/select_block.h"
#include "core/table.h"
#include "ffi_cpu.h"
#if defined(GEARJAX_WITH_CUDA)
#include "cuda/ffi_cuda.h"
#endif

namespace nb = nanobind;
using namespace nb::literals;

namespace gearjax {
namespace {

using HostArray = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;
using Int64Array = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using DoubleArray = nb::ndarray<const double, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// Emulated GPU memory for tests on machines without a GPU: real host memory
// handed out at an address with bit 62 set, which is not canonical on x86-64
// or AArch64, so any host code that dereferences a "device" address instead
// of going through the copy hooks crashes rather than passing by accident.
constexpr uintptr_t kEmulatedDeviceBit = uintptr_t{1} << 62;
size_t emulated_free_bytes = 0;
std::atomic<bool> emulated_copy_fails{false};  // copies into "device" memory throw

// The host address behind an emulated device address.
uint8_t* ToHost(const void* device) {
  return reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(device) & ~kEmulatedDeviceBit);
}

const DeviceMemory kEmulatedDeviceMemory{
    [](size_t bytes) -> void* {
      void* p = std::malloc(bytes);
      return p == nullptr ? nullptr
                          : reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) | kEmulatedDeviceBit);
    },
    [](void* device) { std::free(ToHost(device)); },
    [](void* dst, const void* src, size_t n) {
      if (emulated_copy_fails.load()) throw std::runtime_error("emulated GPU copy failure");
      std::memcpy(ToHost(dst), src, n);
    },
    [](void* dst, const void* src, size_t n) { std::memcpy(dst, ToHost(src), n); },
    []() { return emulated_free_bytes; }};

// A registered table as Python holds it: the table and its handle.
class NativeTable {
 public:
  NativeTable(const std::vector<std::tuple<std::string, int64_t, nb::bytes>>& columns,
              int64_t capacity, int64_t max_length, int remover, int64_t min_size,
              double samples_per_insert, double min_diff, double max_diff, double timeout,
              bool gpu_mapped, bool on_device) {
    TableSpec spec;
    for (const auto& [name, step_bytes, pad] : columns) {
      const auto* pad_bytes = static_cast<const uint8_t*>(pad.data());
      spec.columns.push_back({name, step_bytes, {pad_bytes, pad_bytes + pad.size()}});
    }
    spec.capacity = capacity;
    spec.max_length = max_length;
    spec.remover = static_cast<Remover>(remover);
    spec.limiter = {min_size, samples_per_insert, min_diff, max_diff, timeout};
    spec.gpu_mapped = gpu_mapped;
    spec.on_device = on_device;
    table_ = std::make_shared<Table>(std::move(spec));
    handle_ = RegisterTable(table_);
  }

  ~NativeTable() { Close(); }

  int64_t handle() const { return handle_; }
  // Where the arena is: "device" (GPU memory), "gpu-mapped pinned host" or
  // "host".
  std::string Memory() const {
    if (table_->on_device()) return "device";
    return table_->device_arena() != nullptr ? "gpu-mapped pinned host" : "host";
  }
  bool closed() const { return table_->closed(); }

  void Close() {
    table_->Close();
    UnregisterTable(handle_);
  }

  int64_t Insert(const std::vector<HostArray>& sources, int64_t length, double priority,
                 int64_t restore_key, int64_t restore_slot) {
    if (sources.size() != static_cast<size_t>(table_->num_columns())) {
      throw InvalidArgument("expected " + std::to_string(table_->num_columns()) + " columns");
    }
    std::vector<const void*> pointers;
    for (size_t c = 0; c < sources.size(); ++c) {
      const size_t expected = static_cast<size_t>(length) * table_->step_bytes(static_cast<int>(c));
      if (sources[c].nbytes() != expected) {
        throw InvalidArgument("column '" + table_->spec().columns[c].name + "' holds " +
                              std::to_string(sources[c].nbytes()) + " bytes, expected " +
                              std::to_string(expected));
      }
      pointers.push_back(sources[c].data());
    }
    nb::gil_scoped_release release;  // the copy, and any wait on the limiter
    return table_->Insert(pointers, length, priority, restore_key, restore_slot);
  }

  int64_t UpdatePriorities(Int64Array keys, DoubleArray priorities) {
    if (keys.shape(0) != priorities.shape(0)) {
      throw InvalidArgument("keys and priorities differ in length");
    }
    nb::gil_scoped_release release;
    return table_->UpdatePriorities(keys.data(), priorities.data(),
                                    static_cast<int64_t>(keys.shape(0)));
  }

  void EnsurePriorityTree(double alpha) { table_->EnsurePriorityTree(alpha); }

  // Pins items (all live ones, or those of `keys`) and returns their
  // (keys, slots, lengths, priorities) as NumPy arrays.
  nb::tuple PinItems(nb::object keys) {
    std::vector<ItemInfo> items;
    if (keys.is_none()) {
      items = table_->PinItems();
    } else {
      auto wanted = nb::cast<Int64Array>(keys);
      items = table_->PinItems(wanted.data(), static_cast<int64_t>(wanted.shape(0)));
    }
    const size_t n = items.size();
    NewArray<int64_t> key({n}), slot({n}), length({n});
    NewArray<double> priority({n});
    for (size_t i = 0; i < n; ++i) {
      key.data[i] = items[i].key;
      slot.data[i] = items[i].slot;
      length.data[i] = items[i].length;
      priority.data[i] = items[i].priority;
    }
    return nb::make_tuple(key.array, slot.array, length.array, priority.array);
  }

  void UnpinSlots(Int64Array slots) {
    table_->UnpinSlots(std::vector<int64_t>(slots.data(), slots.data() + slots.shape(0)));
  }

  // The whole region of column c as uint8 [capacity, max_length, step_bytes],
  // kept alive by the table. Read only slots pinned through PinItems.
  nb::ndarray<nb::numpy, uint8_t, nb::ndim<3>> ColumnView(int c) {
    if (c < 0 || c >= table_->num_columns()) throw InvalidArgument("no such column");
    if (table_->on_device()) throw InvalidArgument("a device table has no host view; use read_slot");
    auto* owner = new std::shared_ptr<Table>(table_);
    nb::capsule keep(owner, [](void* p) noexcept { delete static_cast<std::shared_ptr<Table>*>(p); });
    const size_t shape[3] = {static_cast<size_t>(table_->spec().capacity),
                             static_cast<size_t>(table_->spec().max_length),
                             static_cast<size_t>(table_->step_bytes(c))};
    return {table_->arena_data() + table_->column_offset(c), 3, shape, keep};
  }

  // A copy of the first `steps` steps of column c of `slot` as uint8
  // [steps, step_bytes], for any placement. Read only slots pinned through
  // PinItems.
  nb::ndarray<nb::numpy, uint8_t> ReadSlot(int c, int64_t slot, int64_t steps) {
    if (c < 0 || c >= table_->num_columns()) throw InvalidArgument("no such column");
    if (steps < 0 || steps > table_->spec().max_length) throw InvalidArgument("bad step count");
    NewArray<uint8_t> out({static_cast<size_t>(steps), static_cast<size_t>(table_->step_bytes(c))});
    {
      nb::gil_scoped_release release;
      table_->ReadSteps(c, slot, steps, out.data);
    }
    return out.array;
  }

  std::vector<int64_t> FreeSlots() const { return table_->FreeSlots(); }

  void RestoreState(int64_t next_key, int64_t inserts, double samples, int64_t evictions,
                    int64_t priority_updates, const std::vector<int64_t>& free_slots) {
    table_->RestoreState({next_key, inserts, samples, evictions, priority_updates}, free_slots);
  }

  // Samples like the CPU handler but gathers with the GPU kernel's block code
  // run on the CPU (EmulateGather): (keys, start, probability, table_size,
  // mask, timestep, [column bytes as uint8 [batch, width * step_bytes]]).
  nb::tuple EmulateGpuSample(std::tuple<uint32_t, uint32_t> seed, int64_t batch, int strategy,
                             double param, int64_t window, bool pad_left, int64_t threads) {
    if (batch < 1 || threads < 1) throw InvalidArgument("batch and threads must be >= 1");
    const int64_t width = window == 0 ? table_->spec().max_length : window;
    const size_t b = static_cast<size_t>(batch), w = static_cast<size_t>(width);
    NewArray<int64_t> keys({b}), table_size({b});
    NewArray<int32_t> start({b}), timestep({b, w});
    NewArray<float> probability({b});
    NewArray<bool> mask({b, w});
    SampleOutputs out{keys.data, start.data, probability.data, table_size.data,
                      mask.data,  timestep.data, {}};
    nb::list columns;
    for (int c = 0; c < table_->num_columns(); ++c) {
      NewArray<uint8_t> column({b, w * static_cast<size_t>(table_->step_bytes(c))});
      columns.append(column.array);
      out.columns.push_back(column.data);
    }
    const uint32_t words[2] = {std::get<0>(seed), std::get<1>(seed)};
    std::vector<Draw> draws(batch);
    // Plan first (it checks the column limit) so nothing is pinned on error.
    // Host tables gather from their host memory, device tables from behind
    // their emulated addresses.
    const uint8_t* arena = table_->on_device() ? ToHost(table_->device_arena()) : table_->arena_data();
    GatherParams params = PlanGather(*table_, draws.data(), batch, width, pad_left, out, arena);
    table_->Select({static_cast<Strategy>(strategy), param, batch, window}, words, draws.data());
    EmulateGather(params, threads);
    table_->Release(draws.data(), batch);
    return nb::make_tuple(keys.array, start.array, probability.array, table_size.array,
                          mask.array, timestep.array, columns);
  }

  // Takes and returns GPU-sample tickets by hand (tests of the slot protocol).
  uint64_t BeginGpuSample(int64_t batch, int strategy, double param, int64_t window) {
    GpuSelection selection;
    nb::gil_scoped_release release;
    return table_->BeginGpuSample({static_cast<Strategy>(strategy), param, batch, window},
                                  &selection);
  }
  void EndGpuSample(uint64_t ticket) { table_->EndGpuSample(ticket); }

  // Runs the GPU selection's row code on the CPU, reading the selection state
  // through its "device" addresses (with the test mapping, the host ones):
  // (keys, start, probability, table_size, slots, lengths) for the same seed.
  nb::tuple EmulateGpuSelect(std::tuple<uint32_t, uint32_t> seed, int64_t batch, int strategy,
                             double param, int64_t window) {
    if (batch < 1) throw InvalidArgument("batch must be >= 1");
    const size_t b = static_cast<size_t>(batch);
    NewArray<int64_t> keys({b}), table_size({b}), slots({b}), lengths({b});
    NewArray<int32_t> start({b});
    NewArray<float> probability({b});
    GpuSelection selection;
    const uint64_t ticket = table_->BeginGpuSample(
        {static_cast<Strategy>(strategy), param, batch, window}, &selection);
    const uint32_t words[2] = {std::get<0>(seed), std::get<1>(seed)};
    for (int64_t i = 0; i < batch; ++i) {
      const Draw d = SelectRow(selection, words, window, i);
      keys.data[i] = d.key;
      start.data[i] = static_cast<int32_t>(d.start);
      probability.data[i] = d.probability;
      table_size.data[i] = d.table_size;
      slots.data[i] = d.slot;
      lengths.data[i] = d.length;
    }
    table_->EndGpuSample(ticket);
    return nb::make_tuple(keys.array, start.array, probability.array, table_size.array,
                          slots.array, lengths.array);
  }

  nb::dict Stats() const {
    const gearjax::Stats s = table_->GetStats();
    nb::dict d;
    d["size"] = s.size;
    d["capacity"] = s.capacity;
    d["max_length"] = s.max_length;
    d["num_steps"] = s.num_steps;
    d["inserts"] = s.counters.inserts;
    d["samples"] = s.counters.samples;
    d["evictions"] = s.counters.evictions;
    d["priority_updates"] = s.counters.priority_updates;
    d["next_key"] = s.counters.next_key;
    d["writers_in_flight"] = s.writers;
    d["pinned_slots"] = s.pinned_slots;
    d["gpu_samples_in_flight"] = s.gpu_samples_in_flight;
    d["bytes_reserved"] = s.bytes_reserved;
    d["bytes_used"] = s.bytes_used;
    d["seconds_alive"] = s.seconds_alive;
    return d;
  }

 private:
  // A new NumPy array that owns its buffer from the start (so nothing leaks if
  // a later step throws), and the buffer to fill.
  template <typename T>
  struct NewArray {
    explicit NewArray(std::initializer_list<size_t> shape) {
      size_t n = 1;
      for (size_t d : shape) n *= d;
      data = new T[n];
      nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<T*>(p); });
      array = nb::ndarray<nb::numpy, T>(data, shape.size(), shape.begin(), owner);
    }
    T* data;
    nb::ndarray<nb::numpy, T> array;
  };

  std::shared_ptr<Table> table_;
  int64_t handle_;
};

template <typename T>
nb::capsule Capsule(T* fn) {
  static_assert(std::is_invocable_r_v<XLA_FFI_Error*, T, XLA_FFI_CallFrame*>);
  return nb::capsule(reinterpret_cast<void*>(fn));
}

}  // namespace
}  // namespace gearjax

NB_MODULE(_gearjax, m) {
  using gearjax::NativeTable;
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const gearjax::Timeout& e) {
      PyErr_SetString(PyExc_TimeoutError, e.what());
    }
  });

  nb::class_<NativeTable>(m, "NativeTable")
      .def(nb::init<const std::vector<std::tuple<std::string, int64_t, nb::bytes>>&, int64_t,
                    int64_t, int, int64_t, double, double, double, double, bool, bool>(),
           "columns"_a, "capacity"_a, "max_length"_a, "remover"_a, "min_size"_a,
           "samples_per_insert"_a, "min_diff"_a, "max_diff"_a, "timeout"_a, "gpu_mapped"_a,
           "on_device"_a)
      .def_prop_ro("handle", &NativeTable::handle)
      .def_prop_ro("memory", &NativeTable::Memory)
      .def_prop_ro("closed", &NativeTable::closed)
      .def("close", &NativeTable::Close)
      .def("insert", &NativeTable::Insert, "sources"_a, "length"_a, "priority"_a,
           "restore_key"_a = -1, "restore_slot"_a = -1)
      .def("update_priorities", &NativeTable::UpdatePriorities, "keys"_a, "priorities"_a)
      .def("ensure_priority_tree", &NativeTable::EnsurePriorityTree, "alpha"_a)
      .def("pin_items", &NativeTable::PinItems, "keys"_a = nb::none())
      .def("unpin_slots", &NativeTable::UnpinSlots, "slots"_a)
      .def("column_view", &NativeTable::ColumnView, "column"_a)
      .def("read_slot", &NativeTable::ReadSlot, "column"_a, "slot"_a, "steps"_a)
      .def("free_slots", &NativeTable::FreeSlots)
      .def("restore_state", &NativeTable::RestoreState, "next_key"_a, "inserts"_a, "samples"_a,
           "evictions"_a, "priority_updates"_a, "free_slots"_a)
      .def("begin_gpu_sample", &NativeTable::BeginGpuSample, "batch"_a, "strategy"_a, "param"_a,
           "window"_a)
      .def("end_gpu_sample", &NativeTable::EndGpuSample, "ticket"_a)
      .def("emulate_gpu_select", &NativeTable::EmulateGpuSelect, "seed"_a, "batch"_a,
           "strategy"_a, "param"_a, "window"_a)
      .def("emulate_gpu_sample", &NativeTable::EmulateGpuSample, "seed"_a, "batch"_a,
           "strategy"_a, "param"_a, "window"_a, "pad_left"_a, "threads"_a)
      .def("stats", &NativeTable::Stats);

  m.def(
      "philox4x32_10",
      [](std::tuple<uint32_t, uint32_t, uint32_t, uint32_t> counter,
         std::tuple<uint32_t, uint32_t> key) {
        auto [c0, c1, c2, c3] = counter;
        const gearjax::Words4 out =
            gearjax::Philox4x32x10({{c0, c1, c2, c3}}, std::get<0>(key), std::get<1>(key));
        return std::make_tuple(out.w[0], out.w[1], out.w[2], out.w[3]);
      },
      "counter"_a, "key"_a, "The core's Philox4x32-10 block function (for known-answer tests).");

  // For tests on machines without a GPU: tables created while this is on get
  // ordinary host memory that claims to be GPU-mapped at its own address, so
  // the GPU code paths that only read "device" addresses run on the CPU.
  m.def("_emulate_gpu_mapping", [](bool on) {
    static const gearjax::MappedAllocator kHostAsMapped{
        [](size_t bytes, void** device) -> void* {
          // Page-aligned, like cudaHostAlloc.
          void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
          *device = p;
          return p;
        },
        [](void* p) { std::free(p); }};
    gearjax::SetMappedAllocator(on ? &kHostAsMapped : nullptr);
  });

  // For tests on machines without a GPU: tables created while this is on may
  // take placement "device" in emulated GPU memory (see kEmulatedDeviceMemory)
  // reporting `free_bytes` free.
  // With `copies_fail`, every copy into it throws (tests of failed inserts).
  m.def("_emulate_device_memory", [](bool on, size_t free_bytes, bool copies_fail) {
    gearjax::emulated_free_bytes = free_bytes;
    gearjax::emulated_copy_fails.store(copies_fail);
    gearjax::SetDeviceMemory(on ? &gearjax::kEmulatedDeviceMemory : nullptr);
  }, "on"_a, "free_bytes"_a = 0, "copies_fail"_a = false);

  m.def("gpu_free_bytes", []() -> nb::object {
    const gearjax::DeviceMemory* memory = gearjax::GetDeviceMemory();
    if (memory == nullptr) return nb::none();
    return nb::int_(memory->free_bytes());
  }, "Free GPU memory in bytes, or None where gearjax has no GPU memory.");

  m.def("ffi_targets", []() {
    nb::dict targets;
    targets["gearjax_sample"] = gearjax::Capsule(gearjax::SampleCpu);
    targets["gearjax_update_priorities"] = gearjax::Capsule(gearjax::UpdatePrioritiesCpu);
    targets["gearjax_insert_batch"] = gearjax::Capsule(gearjax::InsertBatchCpu);
    return targets;
  });

#if defined(GEARJAX_WITH_CUDA)
  // Built with CUDA handlers. They are registered whether or not a GPU is
  // here (harmless without one); table arenas are GPU-mapped only if one is.
  m.attr("cuda_built") = true;
  m.attr("cuda_memory") = gearjax::InitCudaMemory();
  m.def("cuda_ffi_targets", []() {
    nb::dict targets;
    targets["gearjax_sample"] = gearjax::Capsule(gearjax::SampleCuda);
    targets["gearjax_update_priorities"] = gearjax::Capsule(gearjax::UpdatePrioritiesCuda);
    targets["gearjax_insert_batch"] = gearjax::Capsule(gearjax::InsertBatchCuda);
    return targets;
  });
#else
  m.attr("cuda_built") = false;
  m.attr("cuda_memory") = false;
#endif
}
