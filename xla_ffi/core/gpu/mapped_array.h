// A fixed-size, zero-initialised array of trivially copyable elements, aligned
// to 64 bytes, in GPU-mapped pinned memory when asked for and available (see
// memory.h), otherwise in ordinary memory. Host code indexes it like a vector;
// GPU kernels read device_data() (nullptr when not mapped). Used for the
// selection state GPU kernels read: sum trees, the live-slot list and the
// per-slot records (keys, lengths).
#pragma once

#include <cstddef>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

#include "core/huge_pages.h"
#include "core/memory.h"

namespace gearjax {

template <typename T>
class MappedArray {
  static_assert(std::is_trivially_copyable_v<T>, "MappedArray holds plain data");
  static constexpr std::align_val_t kAlignment{64};

 public:
  // GPU-mapped by the allocator installed now (memory.h), where asked.
  MappedArray(size_t size, bool gpu_mapped)
      : MappedArray(size, gpu_mapped ? GetMappedAllocator() : nullptr) {}
  // GPU-mapped by `allocator` (a table's own, recorded when it was made:
  // the hooks installed now may be others), in ordinary memory without one.
  MappedArray(size_t size, const MappedAllocator* allocator) : size_(size) {
    const size_t bytes = sizeof(T) * (size > 0 ? size : 1);
    if (allocator != nullptr) {
      void* device = nullptr;
      data_ = static_cast<T*>(allocator->allocate(bytes, &device));
      if (data_ != nullptr) {
        mapped_by_ = allocator;
        device_ = static_cast<const T*>(device);
      }
    }
    if (data_ == nullptr) {
      // Large arrays on transparent huge pages, asked for before the first
      // touch below: a batch of draws reads tree lines and slot records at
      // random, and on 4 KiB pages nearly every one of those reads would
      // also miss the TLB.
      if (bytes >= 2 * kHugePageSize) alignment_ = std::align_val_t{kHugePageSize};
      data_ = static_cast<T*>(::operator new(bytes, alignment_));
      if (bytes >= 2 * kHugePageSize) AdviseHugePages(data_, bytes);
    }
    std::memset(static_cast<void*>(data_), 0, bytes);
  }
  ~MappedArray() { Free(); }
  MappedArray(const MappedArray&) = delete;
  MappedArray& operator=(const MappedArray&) = delete;
  MappedArray(MappedArray&& other) noexcept { *this = std::move(other); }
  MappedArray& operator=(MappedArray&& other) noexcept {
    if (this != &other) {
      Free();
      data_ = std::exchange(other.data_, nullptr);
      device_ = std::exchange(other.device_, nullptr);
      mapped_by_ = std::exchange(other.mapped_by_, nullptr);
      size_ = std::exchange(other.size_, 0);
      alignment_ = other.alignment_;
    }
    return *this;
  }

  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T* data() { return data_; }
  const T* data() const { return data_; }
  const T* device_data() const { return device_; }
  size_t size() const { return size_; }

 private:
  void Free() {
    if (data_ == nullptr) return;
    if (mapped_by_ != nullptr) {
      ReleaseMapped(mapped_by_, data_);
    } else {
      ::operator delete(data_, alignment_);
    }
    data_ = nullptr;
  }

  T* data_ = nullptr;
  const T* device_ = nullptr;
  const MappedAllocator* mapped_by_ = nullptr;
  size_t size_ = 0;
  std::align_val_t alignment_ = kAlignment;  // what operator new was given
};

}  // namespace gearjax
