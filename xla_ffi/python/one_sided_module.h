// gearjax._gearjax's one-sided sampling bindings: the native sampler
// (core/one_sided/one_sided.h) over any transport, its plans for compiled samples
// (core/one_sided/one_sided_plan.h), and the owner's memory layout readers decode.
#pragma once

#include <nanobind/nanobind.h>

namespace gearjax {

void DefineOneSided(nanobind::module_& m);

}  // namespace gearjax
