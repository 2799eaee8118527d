// The XLA FFI handler of compiled one-sided samples (see ffi_one_sided.cc).
#pragma once

#include "xla/ffi/api/ffi.h"

namespace gearjax {

XLA_FFI_DECLARE_HANDLER_SYMBOL(OneSidedSampleCpu);

}  // namespace gearjax
