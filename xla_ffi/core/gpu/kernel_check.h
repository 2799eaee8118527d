// Whether this build's GPU kernels run on each GPU, for the CUDA handlers
// (cuda/ffi_cuda.cu: ForThisGpu). Only "they run" is remembered, per GPU:
// a refusal is checked again at each call (cheap), so a failure of the check
// other than a missing kernel image (a lazy module load short of memory
// while XLA holds most of it, a sticky error an earlier kernel left) is
// reported as itself, and a later call that finds the kernels running
// proceeds. Remembering such a failure as "no kernel image" refused the GPU
// for the rest of the process, with a wrong instruction to rebuild.
#pragma once

#include <atomic>
#include <string>

namespace gearjax {

class KernelCheck {
 public:
  // Empty where the kernels run on `device`, else why not. `probe(device)`
  // returns the same (empty, or the problem in its own words) and is asked
  // until it once answers that they run.
  template <typename Probe>
  std::string Check(int device, Probe probe) {
    std::atomic<bool>* runs = device >= 0 && device < kDevices ? &runs_[device] : nullptr;
    if (runs != nullptr && runs->load(std::memory_order_acquire)) return "";
    std::string problem = probe(device);
    if (problem.empty() && runs != nullptr) runs->store(true, std::memory_order_release);
    return problem;
  }

  // Whether `device` is known to run the kernels (for tests).
  bool KnownToRun(int device) const {
    return device >= 0 && device < kDevices && runs_[device].load(std::memory_order_acquire);
  }

 private:
  static constexpr int kDevices = 64;
  std::atomic<bool> runs_[kDevices] = {};
};

}  // namespace gearjax
