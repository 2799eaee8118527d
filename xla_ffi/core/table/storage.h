// Where a table's bytes live. Column c occupies one region of capacity *
// max_length * step_bytes[c] bytes; slot s of column c starts at region + s *
// max_length * step_bytes[c], so any window of any trajectory is one
// contiguous run of bytes per column. Each column's pad step follows the
// regions, inside the arena, so GPU kernels can read it too.
//
// The arena is host memory (GPU-mapped pinned when a GPU is present) or, for
// placement "device", GPU memory that the host reaches only through copies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/memory.h"

namespace gearjax {

struct ColumnSpec {
  std::string name;
  int64_t step_bytes = 0;
  std::vector<uint8_t> pad_step;  // one step's bytes filled with the pad value
};

// The table's bytes, allocated once. Host arenas are GPU-mapped pinned memory
// when asked for and available (see memory.h), otherwise aligned ordinary
// memory. Device arenas are GPU memory: host_data() is nullptr and the host
// goes through Write and Read.
class Arena {
 public:
  // Throws InvalidArgument if a device arena is asked for and no GPU memory
  // hooks are registered, std::bad_alloc if the memory cannot be had. A
  // device arena goes on GPU `device` (< 0: the calling thread's current
  // one), and its copies run with that GPU current.
  Arena(size_t bytes, bool gpu_mapped, bool on_device, int device = -1);
  ~Arena() { Release(); }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // The arena in the host's address space; nullptr for a device arena.
  uint8_t* host_data() const { return host_; }
  // The arena in the GPU's address space; nullptr unless mapped or on device.
  const uint8_t* device_data() const { return device_; }
  bool on_device() const { return device_memory_ != nullptr; }
  // The GPU a device arena lives on; -1 for host arenas.
  int device_ordinal() const { return device_ordinal_; }
  // The hooks that made the memory (memory.h): the mapped allocator of a
  // GPU-mapped host arena, the GPU memory of a device arena; nullptr else.
  const MappedAllocator* mapped_by() const { return mapped_by_; }
  const DeviceMemory* device_memory() const { return device_memory_; }
  size_t bytes() const { return bytes_; }
  // Host <-> arena copies that work for every kind of arena.
  void Write(size_t offset, const void* src, size_t n);
  void Read(void* dst, size_t offset, size_t n) const;
  // Gives the memory back now (a closed table); later accesses are bugs.
  void Release();

 private:
  uint8_t* host_ = nullptr;
  uint8_t* device_ = nullptr;
  const MappedAllocator* mapped_by_ = nullptr;
  const DeviceMemory* device_memory_ = nullptr;
  int device_ordinal_ = -1;
  size_t bytes_ = 0;
};

// Column offsets inside the arena.
class ColumnLayout {
 public:
  // Validates the columns and sizes (throws InvalidArgument).
  ColumnLayout(const std::vector<ColumnSpec>& columns, int64_t capacity, int64_t max_length);

  size_t arena_bytes() const { return arena_bytes_; }
  size_t column_offset(int c) const { return column_offset_[c]; }
  size_t pad_offset(int c) const { return pad_offset_[c]; }
  // Whether column c's pad step is one byte repeated (so memset can fill it).
  bool pad_is_one_byte(int c) const { return pad_one_byte_[c]; }
  // Arena offset of step `step` of slot `slot` in column c.
  size_t StepOffset(int c, int64_t slot, int64_t step) const {
    return column_offset_[c] +
           (static_cast<size_t>(slot) * static_cast<size_t>(max_length_) + static_cast<size_t>(step)) *
               static_cast<size_t>(step_bytes_[c]);
  }

 private:
  int64_t max_length_;
  std::vector<int64_t> step_bytes_;
  std::vector<size_t> column_offset_, pad_offset_;
  std::vector<bool> pad_one_byte_;
  size_t arena_bytes_ = 0;
};

}  // namespace gearjax
