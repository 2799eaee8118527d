// The test-only submodule gearjax._gearjax.testing (built with
// GEARJAX_TESTING=ON; see testing_module.cc).
#pragma once

#include <nanobind/nanobind.h>

#include <cstddef>

#include "core/gpu/mirror_block.h"
#include "core/memory.h"

namespace gearjax::testing {

void DefineModule(nanobind::module_ m);
// GPU priority updates emulated (update_emulation.cc); DefineModule calls it.
void DefineUpdateEmulation(nanobind::module_ m);
// Probes of the GPU path's locks and stream order (gpu_wait_probes.cc); the
// same.
void DefineGpuWaitProbes(nanobind::module_ m);
// A native stack written on a crash (crash_report.cc); the same.
void DefineCrashReport(nanobind::module_ m);

// Host memory that claims to be GPU-mapped at its own address (page
// aligned, like cudaHostAlloc): the emulated mapping's allocate.
void* AllocateHostAsMapped(size_t bytes, void** device);
// Makes `replacement` the mapped allocator (on), or puts back the one an
// emulation replaced (off): never none where a GPU's was.
void ReplaceMapped(bool on, const MappedAllocator* replacement);

// The host address behind an emulated GPU-memory address (the address itself
// when it is not one).
double* EmulatedHost(double* device);
// The copies into tree mirrors a Begin asked for, run on the CPU as the
// CUDA handler's launch runs them (mirrors in emulated GPU memory).
void RunMirrorCopies(MirrorCopies copies);

}  // namespace gearjax::testing
