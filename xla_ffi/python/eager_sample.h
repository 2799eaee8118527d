// The eager sample of the Python module: a host table's windows selected and
// gathered straight into NumPy arrays the caller made, with no XLA program
// (gearjax/_eager_sample.py; Table.sample(..., numpy=True)). The same select
// and gather as the CPU FFI handler (core/gather_cpu.h SelectAndGather), the
// same checks of the arguments (call_site.h CheckedSampleRequest), so the same
// key and contents give the same batch either way.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <vector>

#include "core/table/table.h"

namespace gearjax::python {

template <typename T>
using Out1D = nanobind::ndarray<T, nanobind::ndim<1>, nanobind::c_contig, nanobind::device::cpu>;
template <typename T>
using Out2D = nanobind::ndarray<T, nanobind::ndim<2>, nanobind::c_contig, nanobind::device::cpu>;
using OutBytes = nanobind::ndarray<nanobind::c_contig, nanobind::device::cpu>;
using SeedArray =
    nanobind::ndarray<const uint32_t, nanobind::ndim<1>, nanobind::c_contig, nanobind::device::cpu>;

// What the sample asks (SampleAttrs' fields but the handle) and where its
// results go: keys, start, probability, table_size and valid are [batch];
// mask and timestep [batch, width], written by the gather as the CPU sample
// handler writes them (core/gather_cpu.h); column c is [batch, width, *step] of
// the column's dtype (its bytes are checked: batch * width * step_bytes(c)).
struct EagerSampleArgs {
  int64_t batch, strategy;
  double alpha;
  int64_t count, window, pad_left, cut, replace;
};

struct EagerSampleOutputs {
  Out1D<int64_t> keys;
  Out1D<int32_t> start;
  Out1D<float> probability;
  Out1D<int64_t> table_size;
  Out1D<int32_t> valid;
  Out2D<bool> mask;
  Out2D<int32_t> timestep;
  std::vector<OutBytes> columns;
};

// Samples with the GIL released (Ctrl-C heard while a rate limiter holds it).
// Raises ValueError for arguments or outputs the handler would refuse and
// for a table in GPU memory; the core's classes for a closed table, a
// timeout and a shortfall; what the signal handler raised for a wait that
// gave way to a signal.
void EagerSample(Table& table, SeedArray seed, const EagerSampleArgs& args,
                 const EagerSampleOutputs& out);

}  // namespace gearjax::python
