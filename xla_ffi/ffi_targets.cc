// The extension's XLA FFI targets and state types (ffi_targets.h). sample
// and update_priorities come in two registrations: with stages,
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

// One platform's handlers. sample and update_priorities come per call or as
// stages; one_sided_sample is the CPU's only (null elsewhere).
struct PlatformHandlers {
  XLA_FFI_Handler *sample, *update;
  XLA_FFI_Handler *sample_instantiate, *sample_execute;
  XLA_FFI_Handler *update_instantiate, *update_execute;
  XLA_FFI_Handler *insert_batch, *shard_totals, *shard_plan, *shard_tops, *shard_rank,
      *shard_serve, *shard_keys, *int64_from_words, *zeros, *one_sided_sample;
  XLA_FFI_Handler* update_steps;
};

// The targets gearjax/_ffi.py registers for a platform, by name.
nb::dict Targets(const PlatformHandlers& h, bool stages) {
  nb::dict targets;
  if (stages) {
    targets["gearjax_sample"] = Stages(h.sample_instantiate, h.sample_execute);
    targets["gearjax_update_priorities"] = Stages(h.update_instantiate, h.update_execute);
  } else {
    targets["gearjax_sample"] = Capsule(h.sample);
    targets["gearjax_update_priorities"] = Capsule(h.update);
  }
  targets["gearjax_insert_batch"] = Capsule(h.insert_batch);
  targets["gearjax_update_step_priorities"] = Capsule(h.update_steps);
  targets["gearjax_shard_totals"] = Capsule(h.shard_totals);
  targets["gearjax_shard_plan"] = Capsule(h.shard_plan);
  targets["gearjax_shard_tops"] = Capsule(h.shard_tops);
  targets["gearjax_shard_rank"] = Capsule(h.shard_rank);
  targets["gearjax_shard_serve"] = Capsule(h.shard_serve);
  targets["gearjax_shard_keys"] = Capsule(h.shard_keys);
  targets["gearjax_int64_from_words"] = Capsule(h.int64_from_words);
  targets["gearjax_zeros"] = Capsule(h.zeros);
  if (h.one_sided_sample != nullptr) {
    targets["gearjax_one_sided_sample"] = Capsule(h.one_sided_sample);
  }
  return targets;
}

const PlatformHandlers kCpuHandlers{
    SampleCpu, UpdatePrioritiesCpu,
    SampleInstantiateCpu, SampleExecuteCpu,
    UpdateInstantiateCpu, UpdateExecuteCpu,
    InsertBatchCpu, ShardTotalsCpu, ShardPlanCpu, ShardTopsCpu, ShardRankCpu,
    ShardServeCpu, ShardKeysCpu, Int64FromWordsCpu, ZerosCpu, OneSidedSampleCpu,
    UpdateStepPrioritiesCpu};

#if defined(GEARJAX_WITH_CUDA)
const PlatformHandlers kCudaHandlers{
    SampleCuda, UpdatePrioritiesCuda,
    SampleInstantiateCuda, SampleExecuteCuda,
    UpdateInstantiateCuda, UpdateExecuteCuda,
    InsertBatchCuda, ShardTotalsCuda, ShardPlanCuda, ShardTopsCuda, ShardRankCuda,
    ShardServeCuda, ShardKeysCuda, Int64FromWordsCuda, ZerosCuda, nullptr,
    UpdateStepPrioritiesCuda};
#endif

}  // namespace

void DefineFfiTargets(nb::module_& m) {
  m.def("ffi_types", []() {
    nb::dict types;
    types["gearjax_sample_site"] = TypeRegistration<SampleStateCpu>();
    types["gearjax_update_site"] = TypeRegistration<UpdateStateCpu>();
    return types;
  }, "The CPU targets' state types, to register before the targets with stages.");

  m.def("ffi_targets", [](bool stages) { return Targets(kCpuHandlers, stages); },
        nb::arg("stages"), "The CPU targets; sample and update_priorities with instantiate "
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

  m.def("cuda_ffi_targets", [](bool stages) { return Targets(kCudaHandlers, stages); },
        nb::arg("stages"), "The CUDA targets, as ffi_targets.");
#endif
}

}  // namespace gearjax
