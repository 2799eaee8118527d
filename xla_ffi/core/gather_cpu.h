// The CPU gather: copies sampled windows out of the table arena into output
// buffers, one contiguous run of bytes per row and column, padding the rest.
#pragma once

#include <cstdint>
#include <vector>

#include "table.h"

namespace gearjax {

struct SampleOutputs {
  int64_t* keys;                 // [B]
  int32_t* start;                // [B]
  float* probability;            // [B]
  int64_t* table_size;           // [B]
  int32_t* valid;                // [B]: real steps in the row (XLA derives mask and timestep)
  std::vector<uint8_t*> columns; // [B, W, step_bytes[c]] each
};

// Writes rows [row_begin, row_end) of the outputs for the given draws.
// `width` is the window size W; `pad_left` the padding side.
void GatherRows(const Table& table, const Draw* draws, int64_t row_begin, int64_t row_end,
                int64_t width, bool pad_left, const SampleOutputs& out);

}  // namespace gearjax
