// One platform's XLA FFI handlers by target name, as gearjax/_ffi.py registers
// them with JAX (ffi_targets.cc). A handler is defined once in its platform's
// file and named once, in that platform's list: a new compiled table
// operation adds its handler to each platform's list, and nothing else here.
#pragma once

#include <vector>

#include "xla/ffi/api/c_api.h"

namespace gearjax {

// A target with one handler.
struct FfiTarget {
  const char* name;
  XLA_FFI_Handler* handler;
};

// A target registered either per call (`per_call` makes the call site on
// every call) or in stages (`instantiate` makes it once, `execute` reads it;
// call_site.h): gearjax/_ffi.py picks one.
struct StagedFfiTarget {
  const char* name;
  XLA_FFI_Handler* per_call;
  XLA_FFI_Handler* instantiate;
  XLA_FFI_Handler* execute;
};

struct PlatformTargets {
  std::vector<StagedFfiTarget> staged;
  std::vector<FfiTarget> plain;
};

// The CPU's targets (ffi_cpu.cc).
PlatformTargets CpuTargets();

#if defined(GEARJAX_WITH_CUDA)
// The CUDA targets (cuda/ffi_cuda.cu), the sharded steps' among them
// (CudaShardTargets, cuda/ffi_cuda_shard.cu).
PlatformTargets CudaTargets();
std::vector<FfiTarget> CudaShardTargets();
#endif

}  // namespace gearjax
