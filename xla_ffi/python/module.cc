// The Python extension `gearjax._gearjax`: the native table object the Python
// layer drives (insert, priorities, stats, checkpoint access), the numeric
// contract (limits.h), the nixl exchange's native agent (nixl_module.h), the
// one-sided sampler over any transport (one_sided_module.h) and
// capsules of the FFI handlers for jax.ffi.register_ffi_target. Builds with
// GEARJAX_TESTING add the test-only submodule `testing`
// (testing/testing_module.cc).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "core/limits.h"
#include "core/random.h"
#include "core/sharding/sharding.h"
#include "core/table/footprint.h"
#include "core/table/insert_rows.h"
#include "core/table/registry.h"
#include "core/table/table.h"
#include "core/window.h"
#include "ffi/ffi_one_sided.h"
#include "ffi/ffi_targets.h"
#include "python/eager_sample.h"
#include "python/new_array.h"
#include "python/nixl_module.h"
#include "python/one_sided_module.h"
#include "python/python_gil.h"
#include "python/step_values.h"
#if defined(GEARJAX_WITH_CUDA)
#include "cuda/ffi_cuda.h"
#include "cuda/host_work.h"
#endif
#if defined(GEARJAX_TESTING)
#include "testing/testing_module.h"
#endif

namespace nb = nanobind;
using namespace nb::literals;

namespace gearjax {
namespace {

using HostArray = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;
using Int64Array = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using DoubleArray = nb::ndarray<const double, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// The values of a caller's array, copied while the GIL is held. An array
// handed to the core is read after the GIL is released, and the core reads
// some inputs more than once (checks them, then uses them under the table's
// lock); another Python thread writing the caller's array meanwhile would
// then put values past those checks (a step past its trajectory: a write
// out of bounds; a NaN priority). A copy is what the core may trust.
template <typename T>
std::vector<T> Owned(const nb::ndarray<const T, nb::ndim<1>, nb::c_contig, nb::device::cpu>& a) {
  return std::vector<T>(a.data(), a.data() + a.shape(0));
}

// Items as NumPy arrays: (keys, slots, lengths, priorities, insertion
// stamps, times sampled).
nb::tuple ItemArrays(const std::vector<ItemInfo>& items) {
  const size_t n = items.size();
  NewArray<int64_t> key({n}), slot({n}), length({n}), stamp({n}), times({n});
  NewArray<double> priority({n});
  for (size_t i = 0; i < n; ++i) {
    key.data[i] = items[i].key;
    slot.data[i] = items[i].slot;
    length.data[i] = items[i].length;
    priority.data[i] = items[i].priority;
    stamp.data[i] = items[i].stamp;
    times.data[i] = items[i].times_sampled;
  }
  return nb::make_tuple(key.array, slot.array, length.array, priority.array, stamp.array,
                        times.array);
}

// `values` as a NumPy array that owns them, without a copy.
nb::ndarray<nb::numpy, double> AdoptedArray(std::vector<double>&& values) {
  if (values.empty()) return NewArray<double>({0}).array;
  auto owned = std::make_unique<std::vector<double>>(std::move(values));
  const size_t shape[1] = {owned->size()};
  double* data = owned->data();
  nb::capsule owner(owned.get(),
                    [](void* p) noexcept { delete static_cast<std::vector<double>*>(p); });
  owned.release();  // the capsule owns it now
  return nb::ndarray<nb::numpy, double>(data, 1, shape, owner);
}

// A registered table as Python holds it: the table and its handle. The
// Python layer checked every argument against the contract already; the core
// checks again where values enter it.
class NativeTable {
 public:
  NativeTable(const std::string& name,
              const std::vector<std::tuple<std::string, int64_t, nb::bytes>>& columns,
              int64_t capacity, int64_t max_length, int remover, int64_t min_size,
              double samples_per_insert, double min_diff, double max_diff, double timeout,
              bool gpu_mapped, bool on_device, int key_bits, int64_t max_times_sampled,
              double gpu_wait_seconds, int device, bool step_priorities) {
    TableSpec spec;
    spec.name = name;
    for (const auto& [column, step_bytes, pad] : columns) {
      const auto* pad_bytes = static_cast<const uint8_t*>(pad.data());
      spec.columns.push_back({column, step_bytes, {pad_bytes, pad_bytes + pad.size()}});
    }
    spec.capacity = capacity;
    spec.max_length = max_length;
    spec.remover = CheckRemover(remover);
    spec.limiter = {min_size, samples_per_insert, min_diff, max_diff, timeout};
    spec.gpu_mapped = gpu_mapped;
    spec.on_device = on_device;
    spec.key_bits = key_bits;
    spec.max_times_sampled = max_times_sampled;
    spec.slot_wait_seconds = gpu_wait_seconds;
    spec.device = device;
    spec.step_priorities = step_priorities;
    table_ = std::make_shared<Table>(std::move(spec));
    handle_ = RegisterTable(table_);
  }

  ~NativeTable() {
    if (table_->forked_copy()) {
      // In a forked child: the table's and the registry's state are the
      // parent's copy, possibly mid-change; touch neither. The memory goes
      // with the child.
      new std::shared_ptr<Table>(std::move(table_));  // never freed, on purpose
      return;
    }
    UnregisterTable(handle_);
    table_->Close(/*wait_seconds=*/0);
  }

  int64_t handle() const { return handle_; }
  bool KeepsStepPriorities() const { return table_->keeps_step_priorities(); }
  std::string name() const { return table_->spec().name; }
  int slot_bits() const { return table_->key_layout().slot_bits(); }
  int key_bits() const { return table_->key_layout().key_bits(); }
  // Where the arena is: "device" (GPU memory), "gpu-mapped pinned host" or
  // "host".
  std::string Memory() const {
    if (table_->on_device()) return "device";
    return table_->device_arena() != nullptr ? "gpu-mapped pinned host" : "host";
  }
  // An inherited table in a forked child (core/forks.h) reads as open until
  // the child closes it; every call on it raises, naming the fork.
  bool closed() const { return table_->closed() || closed_in_child_; }
  int64_t waiting() const { return table_->forked_copy() ? 0 : table_->waiting(); }
  bool forked_copy() const { return table_->forked_copy(); }

  // A one-sided sample copying this shard's memory by address holds the
  // table meanwhile (Table::Hold): false once it is closed.
  bool Hold() {
    python::ReleasedGil released;
    return table_->Hold();
  }
  void Release() {
    python::ReleasedGil released;
    table_->Release();
  }

  // Forgets the handle (compiled programs then fail naming the table), closes
  // the table and waits up to `wait_seconds` for what is inside it; returns
  // whether its memory was released.
  bool Close(double wait_seconds) {
    if (table_->forked_copy()) {  // nothing of it is this process's to release
      closed_in_child_ = true;
      return true;
    }
    UnregisterTable(handle_);
    python::ReleasedGil released;
    return table_->Close(wait_seconds);
  }

  // `steps`: a priority per step (length of them) for a table that keeps
  // them, or None.
  int64_t Insert(const std::vector<HostArray>& sources, int64_t length, double priority,
                 std::optional<DoubleArray> steps) {
    if (steps && steps->shape(0) != static_cast<size_t>(length)) {
      throw InvalidArgument("expected " + std::to_string(length) + " step priorities, got " +
                            std::to_string(steps->shape(0)));
    }
    if (sources.size() != static_cast<size_t>(table_->num_columns())) {
      throw InvalidArgument("expected " + std::to_string(table_->num_columns()) + " columns");
    }
    if (length < 1 || length > table_->spec().max_length) {
      throw InvalidArgument("trajectory length " + std::to_string(length) + " is out of range");
    }
    std::vector<const void*> pointers;
    for (size_t c = 0; c < sources.size(); ++c) {
      const size_t expected =
          static_cast<size_t>(length) * static_cast<size_t>(table_->step_bytes(static_cast<int>(c)));
      if (sources[c].nbytes() != expected) {
        throw InvalidArgument("column '" + table_->spec().columns[c].name + "' holds " +
                              std::to_string(sources[c].nbytes()) + " bytes, expected " +
                              std::to_string(expected));
      }
      pointers.push_back(sources[c].data());
    }
    const std::vector<double> step_values = steps ? Owned(*steps) : std::vector<double>();
    python::ReleasedGil released;  // the copy, and any wait on the limiter
    return table_->Insert(pointers, length, priority, -1, -1, -1,
                          steps ? step_values.data() : nullptr);
  }

  // Restores a checkpoint's items in one call: `sources` hold each column's
  // steps of these items back to back, in item order. One GIL release for
  // them all: released per item, a load under busy Python threads waited a
  // switch interval for the GIL after each (50 s for 4,096 items).
  // `steps`: the items' step priorities back to back (a table that keeps
  // them), or None.
  void RestoreItems(const std::vector<HostArray>& sources, Int64Array lengths_array,
                    DoubleArray priorities_array, Int64Array keys_array, Int64Array slots_array,
                    Int64Array stamps_array, std::optional<DoubleArray> steps_array) {
    const std::vector<int64_t> lengths = Owned(lengths_array), keys = Owned(keys_array),
                               slots = Owned(slots_array), stamps = Owned(stamps_array);
    const std::vector<double> priorities = Owned(priorities_array);
    const std::vector<double> steps = steps_array ? Owned(*steps_array) : std::vector<double>();
    const size_t n = lengths.size();
    if (priorities.size() != n || keys.size() != n || slots.size() != n || stamps.size() != n) {
      throw InvalidArgument("lengths, priorities, keys, slots and stamps differ in length");
    }
    if (sources.size() != static_cast<size_t>(table_->num_columns())) {
      throw InvalidArgument("expected " + std::to_string(table_->num_columns()) + " columns");
    }
    uint64_t steps_total = 0;
    for (size_t i = 0; i < n; ++i) {
      if (lengths[i] < 1 || lengths[i] > table_->spec().max_length) {
        throw InvalidArgument("trajectory length " + std::to_string(lengths[i]) +
                              " is out of range");
      }
      steps_total += static_cast<uint64_t>(lengths[i]);
    }
    std::vector<const uint8_t*> at(sources.size());
    std::vector<uint64_t> step_bytes(sources.size());
    for (size_t c = 0; c < sources.size(); ++c) {
      step_bytes[c] = static_cast<uint64_t>(table_->step_bytes(static_cast<int>(c)));
      if (sources[c].nbytes() != steps_total * step_bytes[c]) {
        throw InvalidArgument("column '" + table_->spec().columns[c].name + "' holds " +
                              std::to_string(sources[c].nbytes()) + " bytes, expected " +
                              std::to_string(steps_total * step_bytes[c]));
      }
      at[c] = static_cast<const uint8_t*>(sources[c].data());
    }
    if (steps_array && steps.size() != steps_total) {
      throw InvalidArgument("expected " + std::to_string(steps_total) +
                            " step priorities, got " + std::to_string(steps.size()));
    }
    const double* step_at = steps_array ? steps.data() : nullptr;
    python::ReleasedGil released;
    std::vector<const void*> pointers(sources.size());
    for (size_t i = 0; i < n; ++i) {
      for (size_t c = 0; c < sources.size(); ++c) {
        pointers[c] = at[c];
        at[c] += static_cast<uint64_t>(lengths[i]) * step_bytes[c];
      }
      table_->Insert(pointers, lengths[i], priorities[i], keys[i], slots[i], stamps[i], step_at);
      if (step_at != nullptr) step_at += lengths[i];
    }
  }

  // The columns' element kinds and step shapes, for the one-step fast path
  // (step_values.h); a kind of "" leaves a column to the general path.
  void SetStepFormats(
      const std::vector<std::tuple<std::string, int, std::vector<int64_t>>>& formats) {
    if (formats.size() != static_cast<size_t>(table_->num_columns())) {
      throw InvalidArgument("expected one step format per column");
    }
    std::vector<StepColumn> columns;
    for (size_t c = 0; c < formats.size(); ++c) {
      const auto& [kind, itemsize, shape] = formats[c];
      StepColumn column{nb::str(table_->spec().columns[c].name.c_str()), {}};
      StepFormat& f = column.format;
      f.kind = kind.size() == 1 ? kind[0] : 0;
      f.itemsize = itemsize;
      f.shape = shape;
      for (int64_t d : shape) f.elements *= d;
      if (f.kind != 0 && f.bytes() != table_->step_bytes(static_cast<int>(c))) {
        throw InvalidArgument("a step format disagrees with its column's step size");
      }
      columns.push_back(std::move(column));
    }
    step_columns_ = std::move(columns);
  }

  // Inserts one step (a dict of the columns' values, each of its column's
  // step shape) as a trajectory of length 1 and returns its key; None,
  // inserting nothing, when the step or the priority is not for the fast
  // path (the caller then takes the general one).
  nb::object InsertStep(nb::handle step, nb::handle priority) {
    thread_local std::vector<uint8_t> bytes;
    if (!PyFloat_CheckExact(priority.ptr()) && !PyLong_CheckExact(priority.ptr())) {
      return nb::none();
    }
    const double p = PyFloat_CheckExact(priority.ptr()) ? PyFloat_AS_DOUBLE(priority.ptr())
                                                        : PyLong_AsDouble(priority.ptr());
    if (PyErr_Occurred()) {
      PyErr_Clear();
      return nb::none();
    }
    if (!ValidPriority(p) || !ConvertStep(step, step_columns_, bytes)) return nb::none();
    table_->RaiseDeferredError();  // as every Python Table method does first
    std::vector<const void*> pointers(step_columns_.size());
    const uint8_t* at = bytes.data();
    for (size_t c = 0; c < step_columns_.size(); ++c) {
      pointers[c] = at;
      at += step_columns_[c].format.bytes();
    }
    int64_t key;
    {
      python::ReleasedGil released;  // an insert may wait on the rate limiter
      key = table_->Insert(pointers, 1, p);
    }
    return nb::int_(key);
  }

  // Writes one step (as InsertStep takes it) into row `row` of per-column
  // buffers (`addresses`: each column's C-contiguous [rows, *shape] buffer,
  // which the caller keeps alive and large enough); false, writing nothing,
  // when the step is not for the fast path.
  bool WriteStep(nb::handle step, const std::vector<uintptr_t>& addresses, int64_t row) {
    thread_local std::vector<uint8_t> bytes;
    // A closed table: the general path raises (a writer's buffers are its
    // own, but its steps could never be inserted).
    if (table_->closed() || addresses.size() != step_columns_.size() || row < 0 ||
        !ConvertStep(step, step_columns_, bytes)) {
      return false;
    }
    const uint8_t* at = bytes.data();
    for (size_t c = 0; c < step_columns_.size(); ++c) {
      const int64_t size = step_columns_[c].format.bytes();
      std::memcpy(reinterpret_cast<uint8_t*>(addresses[c]) + row * size, at,
                  static_cast<size_t>(size));
      at += size;
    }
    return true;
  }

  // Refuses (ValueError) n inserts where fewer keys are left (insert_many).
  void CheckKeysLeft(int64_t n) {
    python::ReleasedGil released;  // the table's lock
    table_->CheckKeysLeft(n);
  }

  int64_t UpdatePriorities(Int64Array keys, DoubleArray priorities) {
    if (keys.shape(0) != priorities.shape(0)) {
      throw InvalidArgument("keys and priorities differ in length");
    }
    const std::vector<int64_t> key_values = Owned(keys);
    const std::vector<double> priority_values = Owned(priorities);
    python::ReleasedGil released;
    return table_->UpdatePriorities(key_values.data(), priority_values.data(),
                                    static_cast<int64_t>(key_values.size()));
  }

  // An eager insert_batch from host arrays (gearjax/table.py): column c is
  // [rows, steps, *step] of the column's dtype, C-contiguous; rows whose
  // lengths and priorities the caller checked (checked again here). The
  // insert_batch handler's body (core/table/insert_rows.h), copying with memcpy
  // into a host arena; returns the keys.
  nb::ndarray<nb::numpy, int64_t> InsertRows(const std::vector<HostArray>& columns, int64_t rows,
                                             int64_t steps, Int64Array lengths,
                                             DoubleArray priorities) {
    if (table_->on_device()) {
      throw InvalidArgument("this table lives in GPU memory: insert_batch's host path copies "
                            "into host tables");
    }
    std::vector<ColumnSource> sources;
    for (const HostArray& column : columns) {
      sources.push_back({static_cast<const uint8_t*>(column.data()), column.nbytes()});
    }
    const std::vector<int64_t> length_values(lengths.data(), lengths.data() + lengths.shape(0));
    const std::vector<double> priority_values(priorities.data(),
                                              priorities.data() + priorities.shape(0));
    NewArray<int64_t> keys({static_cast<size_t>(std::max<int64_t>(rows, 0))});
    {
      python::ReleasedGil released;
      uint8_t* arena = table_->arena_data();
      gearjax::InsertRows(
          *table_, rows, steps, sources, keys.array.shape(0), length_values, priority_values,
          [&](const std::vector<ColumnCopy>& copies) {
            for (const ColumnCopy& c : copies) std::memcpy(arena + c.dst_offset, c.src, c.bytes);
          },
          keys.data);
    }
    return keys.array;
  }

  // An eager sample into the caller's NumPy arrays (eager_sample.h).
  void SampleInto(python::SeedArray seed, int64_t batch, int64_t strategy, double alpha,
                  int64_t count, int64_t window, bool pad_left, int64_t cut, bool replace,
                  python::Out1D<int64_t> keys, python::Out1D<int32_t> start,
                  python::Out1D<float> probability, python::Out1D<int64_t> table_size,
                  python::Out1D<int32_t> valid, python::Out2D<bool> mask,
                  python::Out2D<int32_t> timestep, std::vector<python::OutBytes> columns) {
    python::EagerSample(*table_, seed, {batch, strategy, alpha, count, window, pad_left, cut,
                                        replace},
                        {keys, start, probability, table_size, valid, mask, timestep,
                         std::move(columns)});
  }

  // Step priorities: row b of `width` entries names keys[b] (see
  // Table::UpdateStepPriorities); `steps` and `priorities` hold rows * width.
  int64_t UpdateStepPriorities(Int64Array keys, Int64Array steps, DoubleArray priorities,
                               int64_t width) {
    const size_t rows = keys.shape(0);
    if (width < 0 || steps.shape(0) != rows * static_cast<size_t>(width) ||
        priorities.shape(0) != steps.shape(0)) {
      throw InvalidArgument("steps and priorities must hold width entries a key");
    }
    const std::vector<int64_t> key_values = Owned(keys), step_values = Owned(steps);
    const std::vector<double> priority_values = Owned(priorities);
    python::ReleasedGil released;
    return table_->UpdateStepPriorities(key_values.data(), step_values.data(),
                                        priority_values.data(), static_cast<int64_t>(rows),
                                        width);
  }

  // Raises (ValueError) the error a GPU priority update could not raise in
  // its own program (Table::RaiseDeferredError), once.
  void RaiseDeferredError() { table_->RaiseDeferredError(); }

  // Pins items (all live ones, or those of `keys`) and returns their
  // (keys, slots, lengths, priorities, insertion stamps, times sampled) as
  // NumPy arrays; with `steps` (a table that keeps step priorities), a
  // seventh: their step priorities back to back, read at the same moment.
  nb::tuple PinItems(nb::object keys, bool steps) {
    if (steps && !table_->keeps_step_priorities()) {
      throw InvalidArgument("the table keeps no step priorities");
    }
    std::vector<ItemInfo> items;
    std::vector<double> step_priorities;
    std::vector<double>* wanted_steps = steps ? &step_priorities : nullptr;
    // Without the GIL: it may wait for a GPU priority update in flight.
    if (keys.is_none()) {
      python::ReleasedGil released;
      items = table_->PinItems(nullptr, 0, wanted_steps);
    } else {
      auto wanted = nb::cast<Int64Array>(keys);
      python::ReleasedGil released;
      items = table_->PinItems(wanted.data(), static_cast<int64_t>(wanted.shape(0)),
                               wanted_steps);
    }
    nb::tuple arrays = ItemArrays(items);
    if (!steps) return arrays;
    return nb::make_tuple(arrays[0], arrays[1], arrays[2], arrays[3], arrays[4], arrays[5],
                          AdoptedArray(std::move(step_priorities)));
  }

  // A checkpoint's moment (Table::PinSnapshot): the pinned items as
  // PinItems returns them, the counters (a dict), the free slots and the
  // items' step priorities back to back (empty in a table without them).
  nb::tuple PinSnapshot() {
    gearjax::Snapshot snapshot;
    {
      python::ReleasedGil released;  // it may wait for a GPU priority update in flight
      snapshot = table_->PinSnapshot();
    }
    const Counters& c = snapshot.counters;
    nb::dict counters;
    counters["next_sequence"] = c.next_sequence;
    counters["inserts"] = c.inserts;
    counters["samples"] = c.samples;
    counters["evictions"] = c.evictions;
    counters["priority_updates"] = c.priority_updates;
    NewArray<int64_t> free({snapshot.free_slots.size()});
    std::copy(snapshot.free_slots.begin(), snapshot.free_slots.end(), free.data);
    return nb::make_tuple(ItemArrays(snapshot.items), counters, free.array,
                          AdoptedArray(std::move(snapshot.step_priorities)));
  }

  void UnpinSlots(Int64Array slots) {
    for (size_t i = 0; i < slots.shape(0); ++i) {
      if (slots.data()[i] < 0 || slots.data()[i] >= table_->spec().capacity) {
        throw InvalidArgument("no such slot");
      }
    }
    table_->UnpinSlots(std::vector<int64_t>(slots.data(), slots.data() + slots.shape(0)));
  }

  // A copy of the first `steps` steps of column c of `slot` as uint8
  // [steps, step_bytes], for any placement. Read only slots pinned through
  // PinItems.
  nb::ndarray<nb::numpy, uint8_t> ReadSlot(int c, int64_t slot, int64_t steps) {
    if (c < 0 || c >= table_->num_columns()) throw InvalidArgument("no such column");
    if (steps < 0 || steps > table_->spec().max_length) throw InvalidArgument("bad step count");
    NewArray<uint8_t> out({static_cast<size_t>(steps), static_cast<size_t>(table_->step_bytes(c))});
    {
      python::ReleasedGil released;
      table_->ReadSteps(c, slot, steps, out.data);
    }
    return out.array;
  }

  std::vector<int64_t> FreeSlots() const { return table_->FreeSlots(); }

  void RestoreState(int64_t next_sequence, int64_t inserts, double samples, int64_t evictions,
                    int64_t priority_updates, const std::vector<int64_t>& free_slots) {
    python::ReleasedGil released;  // it may wait for a GPU priority update in flight
    table_->RestoreState({next_sequence, inserts, samples, evictions, priority_updates},
                         free_slots);
  }

  // Addresses and layout for one-sided readers in other processes (the nixl
  // exchange registers these spans with its transport, read-only).
  nb::dict RemoteLayout(int strategy, double alpha) {
    gearjax::RemoteLayout r;
    {
      python::ReleasedGil released;  // it may wait for a GPU priority update in flight
      r = table_->Remote(ShardRequest(strategy, alpha));
    }
    nb::dict d;
    d["arena"] = reinterpret_cast<uintptr_t>(r.arena);
    d["arena_bytes"] = r.arena_bytes;
    d["slots"] = reinterpret_cast<uintptr_t>(r.slots);
    d["slots_bytes"] = static_cast<size_t>(table_->spec().capacity) * sizeof(SlotInfo);
    d["stamps"] = reinterpret_cast<uintptr_t>(r.stamps);
    d["stamps_bytes"] = static_cast<size_t>(table_->spec().capacity) * sizeof(int64_t);
    d["tree"] = reinterpret_cast<uintptr_t>(r.tree.nodes);
    d["tree_bytes"] = r.tree_nodes * sizeof(double);
    std::vector<int64_t> offsets(r.tree.offsets, r.tree.offsets + r.tree.levels);
    d["tree_offsets"] = offsets;
    std::vector<int64_t> columns;
    for (int c = 0; c < table_->num_columns(); ++c) {
      columns.push_back(static_cast<int64_t>(table_->column_offset(c)));
    }
    d["column_offsets"] = columns;
    return d;
  }

  void RestoreTimesSampled(int64_t key, int64_t times_sampled) {
    table_->RestoreTimesSampled(key, times_sampled);
  }

  // The alphas with a sum tree of a strategy (Prioritized, PrioritizedSteps:
  // its code), without building the whole stats.
  std::vector<double> Alphas(int strategy) const {
    return table_->Alphas(static_cast<Strategy>(strategy));
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
    d["next_sequence"] = s.counters.next_sequence;
    d["writers_in_flight"] = s.writers;
    d["pinned_slots"] = s.pinned_slots;
    d["samples_in_flight"] = s.samples_in_flight;
    d["bytes_reserved"] = s.bytes_reserved;
    d["bytes_used"] = s.bytes_used;
    d["seconds_alive"] = s.seconds_alive;
    d["alphas"] = s.alphas;
    d["skipped_updates"] = s.skipped_updates;
    return d;
  }

  // What this table, as a shard's owner, has served to the xla exchange.
  nb::dict ExchangeStats() {
    const gearjax::ExchangeTotals t = table_->exchange_counters().Totals();
    nb::dict d, blocks;
    d["serves"] = t.serves;
    d["rows_asked"] = t.rows_asked;
    d["rows_sent"] = t.rows_sent;
    d["bytes_asked"] = t.bytes_asked;
    d["bytes_sent"] = t.bytes_sent;
    for (const auto& [block, serves] : t.serves_by_block) blocks[nb::int_(block)] = serves;
    d["serves_by_block"] = blocks;
    return d;
  }

 private:
  std::shared_ptr<Table> table_;
  int64_t handle_;
  std::vector<StepColumn> step_columns_;
  bool closed_in_child_ = false;  // closed in a forked child (see closed())
};

nb::dict Limits() {
  nb::dict d;
  d["max_capacity"] = kMaxCapacity;
  d["max_length"] = kMaxLength;
  d["max_batch"] = kMaxBatch;
  d["max_result_bytes"] = kMaxResultBytes;
  d["min_priority"] = kMinPriority;
  d["max_priority"] = kMaxPriority;
  d["max_alpha"] = kMaxAlpha;
  d["max_priority_trees"] = kMaxPriorityTrees;
  d["max_samples_per_insert"] = kMaxSamplesPerInsert;
  d["max_error_buffer"] = kMaxErrorBuffer;
  d["max_timeout_seconds"] = kMaxTimeoutSeconds;
  d["max_stamp"] = kMaxStamp;
  return d;
}

// The codes of the core's enums by name, so that Python names them and never
// repeats a number (gearjax/_checks.py).
nb::dict Enums() {
  nb::dict strategy, cut, remover, d;
  for (int64_t code = 0; code < NumStrategies(); ++code) {
    strategy[FindStrategy(code)->key] = static_cast<int>(code);
  }
  cut["start"] = static_cast<int>(Cut::kStart);
  cut["end"] = static_cast<int>(Cut::kEnd);
  cut["full"] = static_cast<int>(Cut::kFull);
  remover["fifo"] = static_cast<int>(Remover::kFifo);
  remover["lifo"] = static_cast<int>(Remover::kLifo);
  remover["min_priority"] = static_cast<int>(Remover::kMinPriority);
  d["strategy"] = strategy;
  d["cut"] = cut;
  d["remover"] = remover;
  return d;
}

// The module's parts, in the order NB_MODULE defines them.

// The core's failures, as subclasses of the built-in classes the docs name
// (TimeoutError, RuntimeError, ValueError), so gearjax.table_error tells
// them from other errors of those classes by type, never by message.
void DefineErrors(nb::module_& m) {
  nb::exception<Timeout> timeout_error(m, "TableTimeoutError", PyExc_TimeoutError);
  // Registered after its base: nanobind tries the newest translator first.
  nb::exception<Shortfall>(m, "TableShortfallError", timeout_error.ptr());
  nb::exception<Closed>(m, "TableClosedError", PyExc_RuntimeError);
  nb::exception<FailedEarlier>(m, "TableFailedEarlierError", PyExc_ValueError);
  // A wait that gave way to a signal raises what the signal's Python handler
  // raised (python_gil.h: RunSignalHandlers left it set); KeyboardInterrupt
  // where no handler ran here.
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Interrupted& e) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_KeyboardInterrupt, e.what());
    }
  });
}

// Signals, interpreter exit, leak warnings, the bookkeeping's footprint.
void DefineProcessHooks(nb::module_& m) {
  m.def(
      "check_signals",
      [] {
        if (PyErr_CheckSignals() != 0) throw nb::python_error();
      },
      "Runs Python's handlers of the signals that arrived (on the main thread), "
      "raising what one raises: a compiled table call that gave way to Ctrl-C "
      "failed its program before Python could run them.");
  m.def(
      "worst_bookkeeping_bytes",
      [](int64_t capacity, int64_t max_length, int remover, bool step_priorities) {
        return WorstBookkeepingBytes(capacity, max_length,
                                              CheckRemover(remover), step_priorities);
      },
      "capacity"_a, "max_length"_a, "remover"_a, "step_priorities"_a = false,
      "Host bytes a table's bookkeeping (all but its arena) may take at its worst "
      "(core/table/footprint.h).");
  m.def("set_leak_warnings", &nb::set_leak_warnings, "enabled"_a,
        "Whether nanobind reports objects still alive when the module unloads "
        "(gearjax._exit turns it off where daemon threads, parked at exit, still "
        "hold tables).");
  m.def("close_exit_gate", &python::CloseExitGate, "wait_seconds"_a,
        "Interpreter exit begins: other threads that would take the GIL park "
        "(python_gil.h). Called by gearjax's atexit handler.");
}

void DefineNativeTable(nb::module_& m) {
  nb::class_<NativeTable>(m, "NativeTable")
      .def(nb::init<const std::string&,
                    const std::vector<std::tuple<std::string, int64_t, nb::bytes>>&, int64_t,
                    int64_t, int, int64_t, double, double, double, double, bool, bool, int,
                    int64_t, double, int, bool>(),
           "name"_a, "columns"_a, "capacity"_a, "max_length"_a, "remover"_a, "min_size"_a,
           "samples_per_insert"_a, "min_diff"_a, "max_diff"_a, "timeout"_a, "gpu_mapped"_a,
           "on_device"_a, "key_bits"_a = 63, "max_times_sampled"_a = 0,
           "gpu_wait_seconds"_a = 60.0, "device"_a = -1, "step_priorities"_a = false)
      .def_prop_ro("handle", &NativeTable::handle)
      .def_prop_ro("name", &NativeTable::name)
      .def_prop_ro("slot_bits", &NativeTable::slot_bits)
      .def_prop_ro("key_bits", &NativeTable::key_bits)
      .def_prop_ro("memory", &NativeTable::Memory)
      .def_prop_ro("closed", &NativeTable::closed)
      .def_prop_ro("forked_copy", &NativeTable::forked_copy)
      .def_prop_ro("waiting", &NativeTable::waiting)
      .def("close", &NativeTable::Close, "wait_seconds"_a)
      .def("hold", &NativeTable::Hold)
      .def("release", &NativeTable::Release)
      .def("insert", &NativeTable::Insert, "sources"_a, "length"_a, "priority"_a,
           "steps"_a = nb::none())
      .def("restore_items", &NativeTable::RestoreItems, "sources"_a, "lengths"_a,
           "priorities"_a, "keys"_a, "slots"_a, "stamps"_a, "steps"_a = nb::none())
      .def_prop_ro("keeps_step_priorities", &NativeTable::KeepsStepPriorities)
      .def("update_step_priorities", &NativeTable::UpdateStepPriorities, "keys"_a, "steps"_a,
           "priorities"_a, "width"_a)
      .def("set_step_formats", &NativeTable::SetStepFormats, "formats"_a)
      // .none(): None (or any object) reaches the fast path, which declines it,
      // and the general path refuses it saying why, not with the binding's
      // signature.
      .def("insert_step", &NativeTable::InsertStep, "step"_a.none(), "priority"_a.none())
      .def("write_step", &NativeTable::WriteStep, "step"_a.none(), "addresses"_a, "row"_a)
      .def("check_keys_left", &NativeTable::CheckKeysLeft, "n"_a)
      .def("update_priorities", &NativeTable::UpdatePriorities, "keys"_a, "priorities"_a)
      .def("insert_rows", &NativeTable::InsertRows, "columns"_a, "rows"_a, "steps"_a,
           "lengths"_a, "priorities"_a)
      .def("sample_into", &NativeTable::SampleInto, "seed"_a, "batch"_a, "strategy"_a,
           "alpha"_a, "count"_a, "window"_a, "pad_left"_a, "cut"_a, "replace"_a, "keys"_a,
           "start"_a, "probability"_a, "table_size"_a, "valid"_a, "mask"_a, "timestep"_a,
           "columns"_a)
      .def("raise_deferred_error", &NativeTable::RaiseDeferredError)
      .def("pin_items", &NativeTable::PinItems, "keys"_a = nb::none(), "steps"_a = false)
      .def("unpin_slots", &NativeTable::UnpinSlots, "slots"_a)
      .def("pin_snapshot", &NativeTable::PinSnapshot)
      .def("read_slot", &NativeTable::ReadSlot, "column"_a, "slot"_a, "steps"_a)
      .def("free_slots", &NativeTable::FreeSlots)
      .def("restore_state", &NativeTable::RestoreState, "next_sequence"_a, "inserts"_a,
           "samples"_a, "evictions"_a, "priority_updates"_a, "free_slots"_a)
      .def("remote_layout", &NativeTable::RemoteLayout, "strategy"_a, "alpha"_a)
      .def("restore_times_sampled", &NativeTable::RestoreTimesSampled, "key"_a,
           "times_sampled"_a)
      .def("stats", &NativeTable::Stats)
      .def("alphas", &NativeTable::Alphas,
           "strategy"_a = static_cast<int>(Strategy::kPrioritized))
      .def("exchange_stats", &NativeTable::ExchangeStats);
}

// The numeric contract, the enums' codes, the window width, Philox, free GPU
// memory: what Python asks the core instead of repeating it.
void DefineContract(nb::module_& m) {
  m.def("limits", &Limits, "The numeric contract every argument is checked against.");
  m.def("window_width", &WindowWidth, "window"_a, "max_length"_a,
        "The steps a row of a sample holds: the window, or max_length for whole trajectories "
        "(window 0). The core's one derivation, which Python asks for the batch's shapes.");
  m.def("enums", &Enums,
        "The codes of the core's strategies, cuts and removers, by name.");

  m.def(
      "philox4x32_10",
      [](std::tuple<uint32_t, uint32_t, uint32_t, uint32_t> counter,
         std::tuple<uint32_t, uint32_t> key) {
        auto [c0, c1, c2, c3] = counter;
        const Words4 out =
            Philox4x32x10({{c0, c1, c2, c3}}, std::get<0>(key), std::get<1>(key));
        return std::make_tuple(out.w[0], out.w[1], out.w[2], out.w[3]);
      },
      "counter"_a, "key"_a, "The core's Philox4x32-10 block function (for known-answer tests).");

  m.def("gpu_free_bytes", []() -> nb::object {
    const DeviceMemory* memory = GetDeviceMemory();
    if (memory == nullptr) return nb::none();
    return nb::int_(memory->free_bytes());
  }, "Free GPU memory in bytes, or None where gearjax has no GPU memory.");
}

// Built with CUDA handlers? They are registered whether or not a GPU is here
// (harmless without one); table arenas are GPU-mapped only if one is.
void DefineCuda(nb::module_& m) {
#if defined(GEARJAX_WITH_CUDA)
  m.attr("cuda_built") = true;
  m.attr("cuda_memory") = InitCudaMemory();
  m.attr("cuda_architectures") = nb::str(kCudaArchitecturesBuilt);
  m.def(
      "cuda_kernel_problem",
      [](int device) { return KernelImageProblemOn(device); },
      "device"_a = 0,
      "Empty when gearjax's CUDA kernels run on GPU `device`; else why not.");
  m.def(
      "cuda_host_work",
      []() {
        nb::dict counts;
        counts["launches"] = HostWorkCount(HostWork::kLaunch);
        counts["copies"] = HostWorkCount(HostWork::kCopy);
        counts["host_functions"] = HostWorkCount(HostWork::kHostFunction);
        counts["syncs"] = HostWorkCount(HostWork::kSync);
        counts["scratch_allocations"] = HostWorkCount(HostWork::kScratch);
        return counts;
      },
      "What the CUDA sample and update handlers have asked of the host since import "
      "(cuda/host_work.h): kernel launches, copies, host functions, stream "
      "synchronisations, scratch allocations.");
#else
  m.attr("cuda_built") = false;
  m.attr("cuda_memory") = false;
  m.attr("cuda_architectures") = nb::str("");
#endif
}

}  // namespace
}  // namespace gearjax

NB_MODULE(_gearjax, m) {
  gearjax::DefineErrors(m);
  gearjax::DefineProcessHooks(m);
  gearjax::DefineNativeTable(m);
  gearjax::DefineNixlAgent(m);
  gearjax::DefineOneSided(m);
  gearjax::DefineContract(m);
  gearjax::DefineFfiTargets(m);
  gearjax::DefineCuda(m);
#if defined(GEARJAX_TESTING)
  gearjax::testing::DefineModule(m.def_submodule(
      "testing", "Test-only hooks: GPU memory emulated on the CPU, GPU selection and gather "
                 "code run on the CPU. Built only with GEARJAX_TESTING=ON."));
#endif
}
