// The extension's XLA FFI targets and state types (ffi_targets.h). sample,
// sample_pure and update_priorities come in two registrations: with stages,
// a dict of an instantiate handler (the call site, made once: call_site.h)
// and an execute handler reading it; without, one handler that makes the
// site on every call. gearjax/_ffi.py picks one, and registers the state
// types first where it picks stages.
#include "ffi_targets.h"

#include <type_traits>

#include "call_site.h"
#include "core/registry.h"
#include "ffi_cpu.h"
#include "ffi_one_sided.h"
#if defined(GEARJAX_WITH_CUDA)
#include "cuda/ffi_cuda.h"
#endif

namespace nb = nanobind;

namespace gearjax {
namespace {

template <typename T>
nb::capsule Capsule(T* fn) {
  static_assert(std::is_invocable_r_v<XLA_FFI_Error*, T, XLA_FFI_CallFrame*>);
  return nb::capsule(reinterpret_cast<void*>(fn));
}

template <typename T, typename U>
nb::dict Stages(T* instantiate, U* execute) {
  nb::dict stages;
  stages["instantiate"] = Capsule(instantiate);
  stages["execute"] = Capsule(execute);
  return stages;
}

// What jax.ffi.register_ffi_type takes: the type id XLA fills in, and how
// XLA deletes a state of the type.
template <typename State>
nb::dict TypeRegistration() {
  static XLA_FFI_TypeInfo info = xla::ffi::MakeTypeInfo<State>();
  nb::dict registration;
  registration["type_id"] = nb::capsule(reinterpret_cast<void*>(&State::id));
  registration["type_info"] = nb::capsule(reinterpret_cast<void*>(&info));
  return registration;
}

}  // namespace

void DefineFfiTargets(nb::module_& m) {
  m.def("ffi_types", []() {
    nb::dict types;
    types["gearjax_sample_site"] = TypeRegistration<SampleStateCpu>();
    types["gearjax_update_site"] = TypeRegistration<UpdateStateCpu>();
    return types;
  }, "The CPU targets' state types, to register before the targets with stages.");

  m.def("ffi_targets", [](bool stages) {
    nb::dict targets;
    if (stages) {
      targets["gearjax_sample"] = Stages(SampleInstantiateCpu, SampleExecuteCpu);
      targets["gearjax_sample_pure"] = Stages(SampleInstantiateCpu, SamplePureExecuteCpu);
      targets["gearjax_update_priorities"] = Stages(UpdateInstantiateCpu, UpdateExecuteCpu);
    } else {
      targets["gearjax_sample"] = Capsule(SampleCpu);
      targets["gearjax_sample_pure"] = Capsule(SamplePureCpu);
      targets["gearjax_update_priorities"] = Capsule(UpdatePrioritiesCpu);
    }
    targets["gearjax_insert_batch"] = Capsule(InsertBatchCpu);
    targets["gearjax_shard_totals"] = Capsule(ShardTotalsCpu);
    targets["gearjax_shard_plan"] = Capsule(ShardPlanCpu);
    targets["gearjax_shard_tops"] = Capsule(ShardTopsCpu);
    targets["gearjax_shard_rank"] = Capsule(ShardRankCpu);
    targets["gearjax_shard_serve"] = Capsule(ShardServeCpu);
    targets["gearjax_shard_keys"] = Capsule(ShardKeysCpu);
    targets["gearjax_int64_from_words"] = Capsule(Int64FromWordsCpu);
    targets["gearjax_zeros"] = Capsule(ZerosCpu);
    targets["gearjax_one_sided_sample"] = Capsule(OneSidedSampleCpu);
    return targets;
  }, nb::arg("stages"), "The CPU targets; sample and update_priorities with instantiate "
     "and execute stages if `stages`, else per call.");

  m.def("call_site_counts", []() {
    nb::dict counts;
    counts["instantiated"] = SitesInstantiated();
    counts["registry_lookups"] = RegistryLookUps();
    return counts;
  }, "Call sites instantiated and table look-ups in the registry since import "
     "(xla_ffi/call_site.h): a staged call looks its table up once, when instantiated.");

#if defined(GEARJAX_WITH_CUDA)
  m.def("cuda_ffi_types", []() {
    nb::dict types;
    types["gearjax_sample_site_cuda"] = TypeRegistration<SampleStateCuda>();
    types["gearjax_update_site_cuda"] = TypeRegistration<UpdateStateCuda>();
    return types;
  }, "The CUDA targets' state types, to register before the targets with stages.");

  m.def("cuda_ffi_targets", [](bool stages) {
    nb::dict targets;
    if (stages) {
      targets["gearjax_sample"] = Stages(SampleInstantiateCuda, SampleExecuteCuda);
      targets["gearjax_sample_pure"] = Stages(SampleInstantiateCuda, SamplePureExecuteCuda);
      targets["gearjax_update_priorities"] = Stages(UpdateInstantiateCuda, UpdateExecuteCuda);
    } else {
      targets["gearjax_sample"] = Capsule(SampleCuda);
      targets["gearjax_sample_pure"] = Capsule(SamplePureCuda);
      targets["gearjax_update_priorities"] = Capsule(UpdatePrioritiesCuda);
    }
    targets["gearjax_insert_batch"] = Capsule(InsertBatchCuda);
    targets["gearjax_shard_totals"] = Capsule(ShardTotalsCuda);
    targets["gearjax_shard_tops"] = Capsule(ShardTopsCuda);
    targets["gearjax_shard_rank"] = Capsule(ShardRankCuda);
    targets["gearjax_shard_plan"] = Capsule(ShardPlanCuda);
    targets["gearjax_shard_serve"] = Capsule(ShardServeCuda);
    targets["gearjax_shard_keys"] = Capsule(ShardKeysCuda);
    targets["gearjax_int64_from_words"] = Capsule(Int64FromWordsCuda);
    targets["gearjax_zeros"] = Capsule(ZerosCuda);
    return targets;
  }, nb::arg("stages"), "The CUDA targets, as ffi_targets.");
#endif
}

}  // namespace gearjax
