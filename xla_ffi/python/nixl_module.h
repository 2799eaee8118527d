// gearjax._gearjax.NixlAgent: the nixl exchange's native agent
// (core/nixl/nixl_agent.h) as Python sees it.
#pragma once

#include <nanobind/nanobind.h>

namespace gearjax {

void DefineNixlAgent(nanobind::module_& m);

}  // namespace gearjax
