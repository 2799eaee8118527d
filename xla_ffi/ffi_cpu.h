// XLA FFI handlers for the CPU platform: sample (ordered, and the pure variant
// of sample(ordered=False)), update_priorities and insert_batch.
#pragma once

#include "xla/ffi/api/ffi.h"

namespace gearjax {

XLA_FFI_DECLARE_HANDLER_SYMBOL(SampleCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(SamplePureCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(UpdatePrioritiesCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(InsertBatchCpu);

}  // namespace gearjax
