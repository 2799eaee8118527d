// XLA FFI handlers for the CPU platform: sample and update_priorities, each
// per call and as instantiate and execute stages (call_site.h); insert_batch;
// the steps of a sharded table's global sample (core/sharding.h); and two
// helpers (zeros of any dtype, int64 from words).
#pragma once

#include "xla/ffi/api/ffi.h"

namespace gearjax {

XLA_FFI_DECLARE_HANDLER_SYMBOL(SampleCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(UpdatePrioritiesCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(SampleInstantiateCpu);  // for SampleExecuteCpu
XLA_FFI_DECLARE_HANDLER_SYMBOL(SampleExecuteCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(UpdateInstantiateCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(UpdateExecuteCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(InsertBatchCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(UpdateStepPrioritiesCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(ShardTotalsCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(ShardPlanCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(ShardTopsCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(ShardRankCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(ShardServeCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(ShardKeysCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Int64FromWordsCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(ZerosCpu);

}  // namespace gearjax
