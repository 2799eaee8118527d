// CUDA side of the extension: the mapped-memory allocator for table arenas and
// the XLA FFI handlers registered for platform "CUDA".
#pragma once

#include "xla/ffi/api/ffi.h"

namespace gearjax {

// Registers GPU-mapped pinned memory for table arenas if a CUDA device is
// usable; returns whether one is.
bool InitCudaMemory();

XLA_FFI_DECLARE_HANDLER_SYMBOL(SampleCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(UpdatePrioritiesCuda);

}  // namespace gearjax
