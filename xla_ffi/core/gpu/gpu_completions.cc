// A table's GPU completion ring and block counts (see gpu_completions.h).
#include "core/gpu/gpu_completions.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace gearjax {

GpuCompletions::GpuCompletions(const MappedAllocator* mapped)
    : done_(kSize, mapped), emulated_counts_(kSize, /*gpu_mapped=*/false) {}

GpuCompletions::~GpuCompletions() {
  for (int d = 0; d < kMaxDevices; ++d) {
    if (uint32_t* counts = counts_[d].load(std::memory_order_relaxed)) {
      ReleaseDevice(memory_[d], counts);
    }
  }
}

void GpuCompletions::AddDevice(int device, const DeviceMemory* memory) {
  if (device == kEmulated) return;  // its counts are made with the ring
  if (device < 0 || device >= kMaxDevices) {
    throw InvalidArgument("GPU " + std::to_string(device) + " is beyond the " +
                          std::to_string(kMaxDevices) + " GPUs a table's samples can run on");
  }
  if (HasDevice(device)) return;
  if (memory == nullptr) throw InvalidArgument("no GPU memory for the completion counts");
  // A real GPU writes the ring: it must be mapped.
  if (done_.device_data() == nullptr) {
    throw std::runtime_error("could not allocate GPU-mapped pinned memory for a table");
  }
  void* counts = memory->allocate(kSize * sizeof(uint32_t));
  if (counts == nullptr) throw std::runtime_error("could not allocate GPU memory for a table");
  try {
    const std::vector<uint32_t> zeros(kSize, 0);
    memory->copy_in(counts, zeros.data(), kSize * sizeof(uint32_t));
  } catch (...) {
    ReleaseDevice(memory, counts);
    throw;
  }
  memory_[device] = memory;
  counts_[device].store(static_cast<uint32_t*>(counts), std::memory_order_release);
}

uint32_t* GpuCompletions::Counts(int device) const {
  if (device == kEmulated) return const_cast<uint32_t*>(emulated_counts_.data());
  if (device < 0 || device >= kMaxDevices) return nullptr;
  return counts_[device].load(std::memory_order_acquire);
}

CompletionView GpuCompletions::View(uint64_t ticket, int device) const {
  uint32_t* counts = Counts(device);
  if (counts == nullptr) {
    throw InvalidArgument("this table has no completion counts on GPU " +
                          std::to_string(device));
  }
  // Where nothing maps (emulations on a machine without a GPU), the emulated
  // kernel writes the host address.
  const uint64_t* done = done_.device_data() != nullptr ? done_.device_data() : done_.data();
  CompletionView view;
  view.done = const_cast<uint64_t*>(done);
  view.blocks = counts;
  view.ticket = ticket;
  view.size = kSize;
  return view;
}

}  // namespace gearjax
