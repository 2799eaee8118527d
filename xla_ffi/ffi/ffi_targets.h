// The extension's XLA FFI targets and state types, as gearjax/_ffi.py
// registers them with JAX.
#pragma once

#include <nanobind/nanobind.h>

namespace gearjax {

// Defines ffi_targets(stages), ffi_types(), cuda_ffi_targets(stages) and
// cuda_ffi_types() (where CUDA handlers are built) and call_site_counts().
void DefineFfiTargets(nanobind::module_& m);

}  // namespace gearjax
