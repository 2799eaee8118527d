// Building the GPU gather's parameters from a table, and running the gather's
// block code on the CPU (EmulateGather) to test the kernel's logic where there
// is no GPU.
#pragma once

#include <cstdint>

#include "gather_block.h"
#include "gather_cpu.h"
#include "table.h"

namespace gearjax {

// Parameters for gathering `batch` draws into `out`. `arena` is the address at
// which the gather sees the table's arena (the host address on the CPU, the
// device address of a mapped or device arena on the GPU). Throws
// InvalidArgument for more than kMaxGpuColumns columns.
GatherParams PlanGather(const Table& table, const Draw* draws, int64_t batch, int64_t width,
                        bool pad_left, const SampleOutputs& out, const uint8_t* arena);

// Runs every block of the gather, emulating `threads` threads per block one
// after another (blocks and threads write disjoint bytes, so order is free),
// each block reporting itself done as the kernel's do (CompleteBlock).
void EmulateGather(const GatherParams& params, int64_t threads);

}  // namespace gearjax
