// See gather_plan.h.
#include "core/gpu/gather_plan.h"

#include <string>

namespace gearjax {

GatherParams PlanGather(const Table& table, const Draw* draws, int64_t batch, int64_t width,
                        bool pad_left, const SampleOutputs& out, const uint8_t* arena) {
  if (table.num_columns() > kMaxGpuColumns) {
    throw InvalidArgument("the GPU gather handles at most " + std::to_string(kMaxGpuColumns) +
                          " columns; this table has " + std::to_string(table.num_columns()));
  }
  GatherParams p{};
  p.draws = draws;
  p.batch = batch;
  p.width = width;
  p.max_length = table.spec().max_length;
  p.num_columns = table.num_columns();
  p.pad_left = pad_left;
  p.keys = out.keys;
  p.start = out.start;
  p.probability = out.probability;
  p.table_size = out.table_size;
  p.valid = out.valid;
  for (int c = 0; c < p.num_columns; ++c) {
    p.columns[c] = GatherColumn{arena + table.column_offset(c), arena + table.pad_offset(c),
                                out.columns[c], table.step_bytes(c)};
  }
  CheckGatherGrid(p);
  return p;
}

void CheckGatherGrid(const GatherParams& p) {
  const int64_t parts = GatherParts(p);
  // The grid's dimensions (rows along x, columns along y, parts along z),
  // and the blocks one completion counter (32 bits) counts: past that the
  // last block never sees the total, and the sample never reports its end.
  if (p.batch > kMaxGatherRows || parts > kMaxGatherParts ||
      static_cast<uint64_t>(p.batch) * static_cast<uint64_t>(p.num_columns) *
              static_cast<uint64_t>(parts) > kMaxGatherBlocks) {
    throw InvalidArgument(
        "a GPU gather of " + std::to_string(p.batch) + " rows of " + std::to_string(p.width) +
        " steps is " + std::to_string(p.batch) + " x " + std::to_string(p.num_columns) +
        " columns x " + std::to_string(parts) + " parts of " +
        std::to_string(kBytesPerGatherBlock) + " bytes, more blocks than a kernel launches "
        "and counts (at most " + std::to_string(kMaxGatherRows) + " rows, " +
        std::to_string(kMaxGatherParts) + " parts and " + std::to_string(kMaxGatherBlocks) +
        " blocks in all): sample fewer rows per call, or a shorter window");
  }
}

void EmulateGather(const GatherParams& params, int64_t threads) {
  const int64_t parts = GatherParts(params);
  const uint64_t blocks = static_cast<uint64_t>(params.batch * params.num_columns * parts);
  for (int64_t b = 0; b < params.batch; ++b) {
    for (int c = 0; c < params.num_columns; ++c) {
      for (int64_t z = 0; z < parts; ++z) {
        for (int64_t t = 0; t < threads; ++t) GatherBlock(params, b, c, z, t, threads);
        CompleteBlock(params.completion, blocks);  // as the kernel's thread 0 does
      }
    }
  }
}

}  // namespace gearjax
