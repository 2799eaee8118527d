// Keys and priorities as programs hand them over (int32, uint32 or int64 keys;
// float32 or float64 priorities), decoded into the core's int64 and float64.
// Shared by the FFI handlers (ffi_common.h) and GPU priority updates staged in
// host memory (staged_update.h). Values are checked later, by the table
// (CheckPriority).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/common.h"

namespace gearjax {

enum class KeyFormat { kInt32, kUInt32, kInt64 };
enum class PriorityFormat { kFloat32, kFloat64 };

inline size_t KeyBytes(KeyFormat format) { return format == KeyFormat::kInt64 ? 8 : 4; }
inline size_t PriorityBytes(PriorityFormat format) {
  return format == PriorityFormat::kFloat64 ? 8 : 4;
}

inline void DecodeKeys(KeyFormat format, const void* data, size_t n, std::vector<int64_t>& out) {
  auto copy = [&](auto* values) { out.assign(values, values + n); };
  switch (format) {
    case KeyFormat::kInt32: return copy(static_cast<const int32_t*>(data));
    case KeyFormat::kUInt32: return copy(static_cast<const uint32_t*>(data));
    case KeyFormat::kInt64: return copy(static_cast<const int64_t*>(data));
  }
}

// A float32 as the float64 of the same value, decoded from its bits: XLA's
// threads treat subnormal inputs as zero, so a plain conversion would turn a
// small positive priority into 0. GPU priority updates decode with it too
// (update_block.h).
GEARJAX_HD double Float32ToDouble(uint32_t bits) {
  const uint32_t mantissa = bits & 0x7fffff;
  if ((bits & 0x7f800000) != 0 || mantissa == 0) {  // normal, zero, inf or NaN: exact as is
    float value;
    std::memcpy(&value, &bits, sizeof(value));
    return static_cast<double>(value);
  }
  // Subnormal: mantissa * 2^-149, built from integers and a normal factor.
  const double magnitude = static_cast<double>(mantissa) * 0x1p-149;
  return (bits >> 31) ? -magnitude : magnitude;
}

inline void DecodePriorities(PriorityFormat format, const void* data, size_t n,
                             std::vector<double>& out) {
  if (format == PriorityFormat::kFloat64) {
    const auto* values = static_cast<const double*>(data);
    out.assign(values, values + n);
    return;
  }
  const auto* bits = static_cast<const uint32_t*>(data);
  out.resize(n);
  for (size_t i = 0; i < n; ++i) out[i] = Float32ToDouble(bits[i]);
}

}  // namespace gearjax
