// The arena and the column layout (see storage.h).
#include "core/table/storage.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/common.h"
#include "core/huge_pages.h"
#include "core/limits.h"

namespace gearjax {
namespace {

constexpr size_t kPageSize = 4096;
constexpr size_t kColumnAlignment = 256;   // each column region starts on a 256 B line
constexpr size_t kMaxArenaBytes = size_t{1} << 62;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

Arena::Arena(size_t bytes, bool gpu_mapped, bool on_device, int device) : bytes_(bytes) {
  const size_t n = std::max<size_t>(bytes, 1);
  if (on_device) {
    const DeviceMemory* memory = GetDeviceMemory();
    if (memory == nullptr) {
      throw InvalidArgument("placement 'device' needs a GPU, and this process has none (or "
                            "gearjax was built without CUDA)");
    }
    const DeviceScope on(memory, device);  // the GPU asked for, not the thread's current one
    device_ = static_cast<uint8_t*>(memory->allocate(n));
    if (device_ == nullptr) throw std::bad_alloc();
    device_memory_ = memory;
    device_ordinal_ = memory->current_device != nullptr ? memory->current_device() : 0;
    return;
  }
  if (gpu_mapped && GetMappedAllocator() != nullptr) {
    void* device = nullptr;
    host_ = static_cast<uint8_t*>(GetMappedAllocator()->allocate(n, &device));
    if (host_ != nullptr) {
      mapped_by_ = GetMappedAllocator();
      device_ = static_cast<uint8_t*>(device);
      return;
    }
  }
  // Sampling reads windows scattered over the whole arena: with 4 KiB pages
  // nearly every row also costs a TLB miss. Arenas of 4 MiB and more are
  // huge-page aligned and ask for transparent huge pages (which the kernel may
  // decline); smaller ones stay on 4 KiB pages so a tiny table never commits
  // 2 MiB. Memory is committed only when touched either way.
  const bool huge = bytes >= 2 * kHugePageSize;
  const size_t alignment = huge ? kHugePageSize : kPageSize;
  const size_t rounded = RoundUp(n, alignment);
  host_ = static_cast<uint8_t*>(std::aligned_alloc(alignment, rounded));
  if (host_ == nullptr) throw std::bad_alloc();
  if (huge) AdviseHugePages(host_, rounded);
}

void Arena::Release() {
  if (device_memory_ != nullptr) {
    ReleaseDevice(device_memory_, device_);
  } else if (mapped_by_ != nullptr) {
    ReleaseMapped(mapped_by_, host_);
  } else {
    std::free(host_);
  }
  host_ = device_ = nullptr;
  device_memory_ = nullptr;
  mapped_by_ = nullptr;
}

void Arena::Write(size_t offset, const void* src, size_t n) {
  if (device_memory_ != nullptr) {
    // The arena's GPU current: a copy and its synchronisation on that GPU.
    const DeviceScope on(device_memory_, device_ordinal_);
    device_memory_->copy_in(device_ + offset, src, n);
  } else {
    std::memcpy(host_ + offset, src, n);
  }
}

void Arena::Read(void* dst, size_t offset, size_t n) const {
  if (device_memory_ != nullptr) {
    const DeviceScope on(device_memory_, device_ordinal_);
    device_memory_->copy_out(dst, device_ + offset, n);
  } else {
    std::memcpy(dst, host_ + offset, n);
  }
}

ColumnLayout::ColumnLayout(const std::vector<ColumnSpec>& columns, int64_t capacity,
                           int64_t max_length)
    : max_length_(max_length) {
  if (columns.empty()) throw InvalidArgument("a table needs at least one column");
  if (capacity < 1 || capacity > kMaxCapacity) {
    throw InvalidArgument("capacity must be in [1, 2**31], got " + std::to_string(capacity));
  }
  if (max_length < 1 || max_length > kMaxLength) {
    throw InvalidArgument("max_length must be in [1, 2**31], got " + std::to_string(max_length));
  }
  const size_t slot_steps = static_cast<size_t>(capacity) * static_cast<size_t>(max_length);
  size_t offset = 0;
  for (const ColumnSpec& c : columns) {
    if (c.step_bytes < 1) throw InvalidArgument("column '" + c.name + "' has an empty step");
    if (static_cast<int64_t>(c.pad_step.size()) != c.step_bytes) {
      throw InvalidArgument("column '" + c.name + "': pad bytes do not match the step size");
    }
    if (slot_steps > kMaxArenaBytes / static_cast<size_t>(c.step_bytes)) {
      throw InvalidArgument("the table is too large to address");
    }
    offset = RoundUp(offset, kColumnAlignment);
    column_offset_.push_back(offset);
    step_bytes_.push_back(c.step_bytes);
    offset += slot_steps * static_cast<size_t>(c.step_bytes);
    if (offset > kMaxArenaBytes) throw InvalidArgument("the table is too large to address");
  }
  for (const ColumnSpec& c : columns) {
    pad_one_byte_.push_back(std::all_of(c.pad_step.begin(), c.pad_step.end(),
                                        [&](uint8_t b) { return b == c.pad_step[0]; }));
    pad_offset_.push_back(offset);
    offset += static_cast<size_t>(c.step_bytes);
  }
  arena_bytes_ = offset;
}

}  // namespace gearjax
