// Building the GPU gather's parameters from a table, and running the gather's
// block code on the CPU (EmulateGather) to test the kernel's logic where there
// is no GPU.
#pragma once

#include <cstdint>

#include "core/gather_cpu.h"
#include "core/gpu/gather_block.h"
#include "core/table/table.h"

namespace gearjax {

// Parameters for gathering `batch` draws into `out`. `arena` is the address at
// which the gather sees the table's arena (the host address on the CPU, the
// device address of a mapped or device arena on the GPU). Throws
// InvalidArgument for more than kMaxGpuColumns columns, or a grid past
// CheckGatherGrid's limits.
GatherParams PlanGather(const Table& table, const Draw* draws, int64_t batch, int64_t width,
                        bool pad_left, const SampleOutputs& out, const uint8_t* arena);

// The gather kernel's grid: rows along x (a launch's 2^31 - 1), columns
// along y, parts of a window along z (65,535), and blocks in all, which one
// 32-bit completion counter counts (completion_block.h).
inline constexpr int64_t kMaxGatherRows = 0x7fffffff;
inline constexpr int64_t kMaxGatherParts = 65535;
inline constexpr uint64_t kMaxGatherBlocks = 0xffffffffull;
// Throws InvalidArgument, saying what to change, where `params` needs a grid
// past those limits (a kernel that would never report its end).
void CheckGatherGrid(const GatherParams& params);

// Runs every block of the gather, emulating `threads` threads per block one
// after another (blocks and threads write disjoint bytes, so order is free),
// each block reporting itself done as the kernel's do (CompleteBlock).
void EmulateGather(const GatherParams& params, int64_t threads);

}  // namespace gearjax
