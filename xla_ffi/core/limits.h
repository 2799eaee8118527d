// The numeric contract of a table, in one place: the ranges every size, count,
// priority and rate-limiter setting must lie in. The Python layer reads these
// values from the extension (gearjax/_checks.py) and checks every argument
// against them before anything reaches native code; the core checks them again
// where values enter it, before any narrowing. Nothing outside these ranges is
// ever truncated, wrapped or clamped silently.
#pragma once

#include <cfloat>
#include <cstdint>
#include <cstring>

#include "core/common.h"

namespace gearjax {

// Slots per table and steps per slot. Slots and steps index int32 outputs
// (batch.start, batch.timestep), so both stay below 2^31.
inline constexpr int64_t kMaxCapacity = int64_t{1} << 31;
inline constexpr int64_t kMaxLength = int64_t{1} << 31;

// Rows per sample (batch.keys and friends are indexed by int32 on the GPU).
inline constexpr int64_t kMaxBatch = (int64_t{1} << 31) - 1;

// The largest single result buffer a sample may ask XLA for: 2^47 bytes is the
// user address space of x86-64 and AArch64 Linux, so anything larger is a
// mistake, not a big batch.
inline constexpr int64_t kMaxResultBytes = int64_t{1} << 47;

// Priorities are 0 or normal float64 values in [kMinPriority, kMaxPriority];
// Prioritized(alpha) takes alpha in [0, kMaxAlpha], not subnormal (XLA's
// threads would read a subnormal alpha as 0). With these bounds a
// weight priority ** alpha is at most 1e240, so the sum over 2^31 slots stays
// far below the float64 limit: totals never overflow and probabilities stay
// finite. Weights below kMinWeight (the smallest normal float64) count as
// kMinWeight, so every positive priority stays drawable even where XLA's
// threads flush subnormal numbers to zero.
inline constexpr double kMinPriority = DBL_MIN;
// kMaxPriority is 1e30 rounded to float32 (1.0000000150474662e+30), so that
// priorities computed in float32 and clipped to 1e30 (jnp.clip(p, 0, 1e30))
// are accepted.
inline constexpr double kMaxPriority = static_cast<double>(1e30f);
inline constexpr double kMaxAlpha = 8.0;
inline constexpr double kMinWeight = DBL_MIN;

// Whether v is a subnormal float64, judged on its bits, so that the answer is
// the same where the CPU treats subnormal inputs as zero (XLA's threads do).
GEARJAX_HD bool IsSubnormal(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  return (bits & 0x7ff0000000000000ull) == 0 && (bits & 0x000fffffffffffffull) != 0;
}

// Whether `priority` is 0 or a normal float64 in [kMinPriority, kMaxPriority].
// Inline, and for GPU kernels too: every priority of every update passes here.
GEARJAX_HD bool ValidPriority(double priority) {
  return !IsSubnormal(priority) && priority >= 0.0 && priority <= kMaxPriority;
}

// Distinct Prioritized alphas a table keeps a sum tree for. Each tree costs
// memory and is updated on every insert and priority update, so the number is
// bounded; an alpha takes a place only when a sample with it is admitted.
inline constexpr int kMaxPriorityTrees = 8;

// At most this many step priorities a table (capacity * max_length, with
// step_priorities): a step tree's leaves stay within kSumTreeMaxLevels.
inline constexpr int64_t kMaxStepPriorities = int64_t{1} << 33;

// Rate limiter settings: every product the limiter forms (inserts *
// samples_per_insert, min_size * samples_per_insert +- error_buffer) stays
// finite and far from float64's limit with these bounds.
inline constexpr double kMaxSamplesPerInsert = 1e9;
inline constexpr double kMaxErrorBuffer = 1e15;
// Waits longer than this (about 31 years) are treated as a mistake; a
// std::chrono deadline built from them could overflow.
inline constexpr double kMaxTimeoutSeconds = 1e9;

}  // namespace gearjax
