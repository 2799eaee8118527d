// The test-only submodule gearjax._gearjax.testing (built with
// GEARJAX_TESTING=ON; see testing_module.cc).
#pragma once

#include <nanobind/nanobind.h>

#include "core/mirror_block.h"

namespace gearjax::testing {

void DefineModule(nanobind::module_ m);
// GPU priority updates emulated (update_emulation.cc); DefineModule calls it.
void DefineUpdateEmulation(nanobind::module_ m);
// Probes of the GPU path's locks and stream order (gpu_wait_probes.cc); the
// same.
void DefineGpuWaitProbes(nanobind::module_ m);

// The host address behind an emulated GPU-memory address (the address itself
// when it is not one).
double* EmulatedHost(double* device);
// The copies into tree mirrors a Begin asked for, run on the CPU as the
// CUDA handler's launch runs them (mirrors in emulated GPU memory).
void RunMirrorCopies(MirrorCopies copies);

}  // namespace gearjax::testing
