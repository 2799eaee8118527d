// See gather_plan.h.
#include "gather_plan.h"

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
  return p;
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
