// Test-only: the key and priority formats of NumPy arrays handed to the
// testing module's emulated GPU updates, refused as the CUDA handler refuses
// other types.
#pragma once

#include <nanobind/ndarray.h>

#include <cstdint>

#include "core/common.h"
#include "core/decode.h"

namespace gearjax::testing {

using AnyArray =
    nanobind::ndarray<nanobind::numpy, nanobind::c_contig, nanobind::device::cpu, nanobind::ndim<1>>;

inline KeyFormat KeyFormatOf(const AnyArray& keys) {
  if (keys.dtype() == nanobind::dtype<int32_t>()) return KeyFormat::kInt32;
  if (keys.dtype() == nanobind::dtype<uint32_t>()) return KeyFormat::kUInt32;
  if (keys.dtype() == nanobind::dtype<int64_t>()) return KeyFormat::kInt64;
  throw InvalidArgument("keys must be int32, uint32 or int64");
}

inline PriorityFormat PriorityFormatOf(const AnyArray& priorities) {
  if (priorities.dtype() == nanobind::dtype<float>()) return PriorityFormat::kFloat32;
  if (priorities.dtype() == nanobind::dtype<double>()) return PriorityFormat::kFloat64;
  throw InvalidArgument("priorities must be float32 or float64");
}

}  // namespace gearjax::testing
