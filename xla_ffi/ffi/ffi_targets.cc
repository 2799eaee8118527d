// The extension's XLA FFI targets and state types (ffi_targets.h), from each
// platform's list of handlers by name (ffi_handlers.h). sample and
// update_priorities come in two registrations: with stages,
// a dict of an instantiate handler (the call site, made once: call_site.h)
// and an execute handler reading it; without, one handler that makes the
// site on every call. gearjax/_ffi.py picks one, and registers the state
// types first where it picks stages.
#include "ffi/ffi_targets.h"

#include <type_traits>

#include "core/table/registry.h"
#include "ffi/call_site.h"
#include "ffi/ffi_handlers.h"
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

// The targets gearjax/_ffi.py registers for a platform, by name.
nb::dict Targets(const PlatformTargets& platform, bool stages) {
  nb::dict targets;
  for (const StagedFfiTarget& t : platform.staged) {
    if (stages) {
      targets[t.name] = Stages(t.instantiate, t.execute);
    } else {
      targets[t.name] = Capsule(t.per_call);
    }
  }
  for (const FfiTarget& t : platform.plain) targets[t.name] = Capsule(t.handler);
  return targets;
}

}  // namespace

void DefineFfiTargets(nb::module_& m) {
  m.def("ffi_types", []() {
    nb::dict types;
    types["gearjax_sample_site"] = TypeRegistration<SampleStateCpu>();
    types["gearjax_update_site"] = TypeRegistration<UpdateStateCpu>();
    return types;
  }, "The CPU targets' state types, to register before the targets with stages.");

  m.def("ffi_targets", [](bool stages) { return Targets(CpuTargets(), stages); },
        nb::arg("stages"), "The CPU targets; sample and update_priorities with instantiate "
        "and execute stages if `stages`, else per call.");

  m.def("call_site_counts", []() {
    nb::dict counts;
    counts["instantiated"] = SitesInstantiated();
    counts["registry_lookups"] = RegistryLookUps();
    return counts;
  }, "Call sites instantiated and table look-ups in the registry since import "
     "(xla_ffi/ffi/call_site.h): a staged call looks its table up once, when instantiated.");

#if defined(GEARJAX_WITH_CUDA)
  m.def("cuda_ffi_types", []() {
    nb::dict types;
    types["gearjax_sample_site_cuda"] = TypeRegistration<SampleStateCuda>();
    types["gearjax_update_site_cuda"] = TypeRegistration<UpdateStateCuda>();
    return types;
  }, "The CUDA targets' state types, to register before the targets with stages.");

  m.def("cuda_ffi_targets", [](bool stages) { return Targets(CudaTargets(), stages); },
        nb::arg("stages"), "The CUDA targets, as ffi_targets.");
#endif
}

}  // namespace gearjax
