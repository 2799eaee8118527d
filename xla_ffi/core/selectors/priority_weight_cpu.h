// priority ** alpha on the CPU, one at a time and in batches, with one kernel
// per SIMD level (cpu_simd.h) that gives the same bits at every level: a
// tree's leaves are the same whichever call set them (an insert, an update,
// a restore's rebuild), so its sums, and hence its draws, are too.
//
// Why not std::pow: a per-step update writes a weight for every step of its
// windows (5,120 for 256 windows of 20), and libm's pow, 15-20 ns a call on
// the project's CPU machine, was a quarter of such an update. The AVX2
// kernel takes about 4.5 ns a weight there (timed by hand).
//
// How: x = 2^e * m with m in [sqrt(1/2), sqrt(2)); ln m = 2 atanh(s) with
// s = (m - 1) / (m + 1), its series to s^21; y = alpha * (e ln 2 + ln m);
// exp(y) = 2^k exp(r) with k = round(y / ln 2), r = y - k ln 2 (ln 2 in two
// parts, Cody and Waite), exp(r) by its series to r^13. The polynomials are
// evaluated in Estrin's order (short dependency chains), with additions and
// multiplications only, never fused (this file is built with
// -ffp-contract=off), so the scalar and vector kernels round alike.
//
// Accuracy (priority_weight_cpu_test.cc checks it against long double pow):
// within 3e-15 of the exact value, relative, where |alpha * ln p| < 10, and
// within 2e-13 over the whole range limits.h admits: the roundings of ln p
// and of alpha * ln p cost up to |alpha * ln p| * 2^-53 each, and
// |alpha * ln p| stays below 709 wherever the weight is not clamped.
// Sampling weights need far less; the GPU's pow (update_block.h) may differ
// from it in the last bits, as it did from libm's.
#pragma once

#include <cstdint>

namespace gearjax {

// priority ** alpha for a positive normal priority and a normal alpha in
// (0, 8] (limits.h), raised to at least kMinWeight. PriorityWeight's host half.
double PriorityPowCpu(double priority, double alpha);

// weights[i] = PriorityWeight(priorities[i], alpha) for n priorities (0 or
// valid, limits.h), by the kernel of the active SIMD level. `weights` may be
// `priorities` (in place).
void PriorityWeightsCpu(const double* priorities, double alpha, double* weights, int64_t n);

}  // namespace gearjax
