// The XLA FFI handler of a compiled one-sided sample of a sharded table
// (gearjax_one_sided_sample, CPU): a registered plan (core/one_sided/one_sided_plan.h)
// run with the program's seed, its results written into the program's
// buffers. Operands: the order (the table state, never read) and
// the seed (uint32[2]); results: the order, keys (int64[B]), start (int32),
// probability (float32), table_size (int64), valid (int32), shard (int32),
// then one [B, W, ...] buffer per column; attribute: plan_handle.
#include "ffi/ffi_one_sided.h"

#include <string>

#include "core/one_sided/one_sided_plan.h"
#include "ffi/ffi_common.h"

namespace ffi = xla::ffi;

namespace gearjax {
namespace {

constexpr size_t kFixed = 6;

ffi::Error OneSidedSampleImpl(Order, ffi::Buffer<ffi::U32> seed, ffi::RemainingRets rets,
                              int64_t plan_handle) {
  std::shared_ptr<one_sided::Plan> plan = one_sided::LookUpPlan(plan_handle);
  const size_t columns = plan->columns().size();
  if (seed.element_count() != 2) return Fail("a one-sided sample's seed is two uint32 words");
  if (rets.size() != 1 + kFixed + columns) {
    return Fail("a one-sided sample returns " + std::to_string(1 + kFixed + columns) +
                " results, got " + std::to_string(rets.size()));
  }
  const int64_t batch = plan->batch();
  const int64_t sizes[kFixed] = {8, 4, 4, 8, 4, 4};  // bytes per row of each fixed result
  void* fixed[kFixed];
  for (size_t i = 0; i < kFixed; ++i) {
    auto result = rets.get<ffi::AnyBuffer>(1 + i).value();
    if (static_cast<int64_t>(result->size_bytes()) != batch * sizes[i]) {
      return Fail("a one-sided sample's result " + std::to_string(i) + " has the wrong size");
    }
    fixed[i] = result->untyped_data();
  }
  one_sided::Outputs out{static_cast<int64_t*>(fixed[0]), static_cast<int32_t*>(fixed[1]),
                         static_cast<float*>(fixed[2]), static_cast<int64_t*>(fixed[3]),
                         static_cast<int32_t*>(fixed[4]), static_cast<int32_t*>(fixed[5]),
                         {}};
  for (size_t c = 0; c < columns; ++c) {
    auto result = rets.get<ffi::AnyBuffer>(1 + kFixed + c).value();
    if (static_cast<int64_t>(result->size_bytes()) !=
        batch * plan->width() * plan->columns()[c].step_bytes) {
      return Fail("a one-sided sample's column " + std::to_string(c) + " has the wrong size");
    }
    out.columns.push_back(static_cast<uint8_t*>(result->untyped_data()));
  }
  plan->Sample(seed.typed_data(), out);
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(OneSidedSampleCpu, Guarded<&OneSidedSampleImpl>::Run,
                              ffi::Ffi::Bind()
                                  .Arg<Order>()
                                  .Arg<ffi::Buffer<ffi::U32>>()
                                  .RemainingRets()
                                  .Attr<int64_t>("plan_handle"));

}  // namespace gearjax
