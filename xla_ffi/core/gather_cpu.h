// The CPU gather: copies sampled windows out of the table arena into output
// buffers, one contiguous run of bytes per row and column, padding the rest.
#pragma once

#include <cstdint>
#include <vector>

#include "core/draw.h"
#include "core/table/table.h"

namespace gearjax {

struct SampleOutputs {
  int64_t* keys;                 // [B]
  int32_t* start;                // [B]
  float* probability;            // [B]
  int64_t* table_size;           // [B]
  int32_t* valid;                // [B]: real steps in the row
  std::vector<uint8_t*> columns; // [B, W, step_bytes[c]] each
  // [B, W] each, written when set: which steps of a row are real, and their
  // step in the trajectory (0 for padding). The CPU sample handler and the
  // eager sample set them; on a GPU, XLA derives them from start and valid
  // (gearjax/_window_steps.py says why).
  bool* mask = nullptr;
  int32_t* timestep = nullptr;
};

// Writes rows [row_begin, row_end) of the outputs for the given draws.
// `width` is the window size W; `pad_left` the padding side.
void GatherRows(const Table& table, const Draw* draws, int64_t row_begin, int64_t row_end,
                int64_t width, bool pad_left, const SampleOutputs& out);

// A whole host sample: selects the request's rows (taking a ticket), has
// `gather(begin, end)` write rows [begin, end) of the outputs (GatherRows, on
// one thread or shared out) and hands the ticket back, also when the gather
// throws. The CPU FFI handler and the Python module's eager sample both
// sample through it; `seed` is two words.
template <typename Gather>
void SelectAndGather(Table& table, const SampleRequest& request, const uint32_t* seed,
                     Gather&& gather) {
  // Reused by every sample on this thread: no allocation per call. Named
  // through a reference, so a gather's helper threads reach this thread's
  // buffer, not their own thread_local one.
  thread_local std::vector<Draw> scratch;
  std::vector<Draw>& draws = scratch;
  draws.resize(static_cast<size_t>(request.batch));
  struct EndSample {
    Table& table;
    uint64_t ticket;
    ~EndSample() { table.EndSample(ticket); }
  } end{table, table.Select(request, seed, draws.data())};
  gather(static_cast<const Draw*>(draws.data()));
}

}  // namespace gearjax
