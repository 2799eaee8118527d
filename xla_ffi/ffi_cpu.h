// XLA FFI handlers for the CPU platform: sample and update_priorities.
#pragma once

#include "xla/ffi/api/ffi.h"

namespace gearjax {

XLA_FFI_DECLARE_HANDLER_SYMBOL(SampleCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(UpdatePrioritiesCpu);

}  // namespace gearjax
