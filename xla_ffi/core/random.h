// Turning raw random bits into draws. The bits come from jax.random inside the
// traced program (so the same key gives the same batch); this header is the one
// place that maps them to a uniform double and to an integer range.
#pragma once

#include <cstdint>

#include "common.h"

namespace gearjax {

// Random words consumed per sampled row: two for the trajectory draw (53-bit
// uniform) and two for the window start (64-bit integer draw).
inline constexpr int kBitsPerRow = 4;

// A uniform double in [0, 1) from 53 of the 64 bits in (hi, lo).
GEARJAX_HD double UniformFromBits(uint32_t hi, uint32_t lo) {
  const uint64_t word = (static_cast<uint64_t>(hi) << 32) | lo;
  return static_cast<double>(word >> 11) * 0x1.0p-53;
}

// An integer in [0, n) from 64 bits by multiply-shift. The bias is at most
// n / 2^64, far below anything a test or a training run can observe.
GEARJAX_HD uint64_t BelowFromBits(uint32_t hi, uint32_t lo, uint64_t n) {
  const uint64_t word = (static_cast<uint64_t>(hi) << 32) | lo;
#if defined(__CUDA_ARCH__)
  return __umul64hi(word, n);
#else
  return static_cast<uint64_t>((static_cast<unsigned __int128>(word) * n) >> 64);
#endif
}

}  // namespace gearjax
