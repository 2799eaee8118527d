// The test-only submodule gearjax._gearjax.testing (built with
// GEARJAX_TESTING=ON; see testing_module.cc).
#pragma once

#include <nanobind/nanobind.h>

namespace gearjax::testing {

void DefineModule(nanobind::module_ m);
// GPU priority updates emulated (update_emulation.cc); DefineModule calls it.
void DefineUpdateEmulation(nanobind::module_ m);

}  // namespace gearjax::testing
