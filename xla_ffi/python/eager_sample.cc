// The Python module's eager sample (eager_sample.h).
#include "python/eager_sample.h"

#include <string>

#include "core/gather_cpu.h"
#include "core/window.h"
#include "ffi/call_site.h"
#include "python/python_gil.h"

namespace gearjax::python {
namespace {

void CheckRows(size_t rows, int64_t batch, const char* name) {
  if (static_cast<int64_t>(rows) != batch) {
    throw InvalidArgument(std::string(name) + " must hold one entry per row of the batch");
  }
}

void CheckSteps(const Out2D<bool>& mask, const Out2D<int32_t>& timestep, int64_t batch,
                int64_t width) {
  if (static_cast<int64_t>(mask.shape(0)) != batch || static_cast<int64_t>(mask.shape(1)) != width ||
      static_cast<int64_t>(timestep.shape(0)) != batch ||
      static_cast<int64_t>(timestep.shape(1)) != width) {
    throw InvalidArgument("mask and timestep must be [batch, width]");
  }
}

}  // namespace

void EagerSample(Table& table, SeedArray seed, const EagerSampleArgs& args,
                 const EagerSampleOutputs& out) {
  if (table.on_device()) {
    throw InvalidArgument("this table lives in GPU memory (placement 'device'): numpy=True "
                          "samples host tables; sample it without numpy=True");
  }
  if (seed.shape(0) != 2) throw InvalidArgument("the seed must be two uint32 words");
  const SampleAttrs attrs{/*table_handle=*/0, args.batch, args.strategy, args.alpha, args.count,
                          args.window, args.pad_left, args.cut, args.replace};
  const SampleRequest request = CheckedSampleRequest(table, attrs);
  const int64_t width = WindowWidth(args.window, table.spec().max_length);
  CheckRows(out.keys.shape(0), request.batch, "keys");
  CheckRows(out.start.shape(0), request.batch, "start");
  CheckRows(out.probability.shape(0), request.batch, "probability");
  CheckRows(out.table_size.shape(0), request.batch, "table_size");
  CheckRows(out.valid.shape(0), request.batch, "valid");
  CheckSteps(out.mask, out.timestep, request.batch, width);
  if (out.columns.size() != static_cast<size_t>(table.num_columns())) {
    throw InvalidArgument("expected one output array per column");
  }
  SampleOutputs outputs{out.keys.data(), out.start.data(), out.probability.data(),
                        out.table_size.data(), out.valid.data(), {}, out.mask.data(),
                        out.timestep.data()};
  for (int c = 0; c < table.num_columns(); ++c) {
    const OutBytes& column = out.columns[c];
    if (static_cast<int64_t>(column.nbytes()) != request.batch * width * table.step_bytes(c)) {
      throw InvalidArgument("the output of column '" + table.spec().columns[c].name +
                            "' has the wrong size");
    }
    outputs.columns.push_back(static_cast<uint8_t*>(column.data()));
  }
  const bool pad_left = args.pad_left != 0;
  ReleasedGil released;
  try {
    SelectAndGather(table, request, seed.data(), [&](const Draw* draws) {
      GatherRows(table, draws, 0, request.batch, width, pad_left, outputs);
    });
  } catch (const InvalidArgument& e) {
    // A failure as the sample ran (every priority 0), past the argument
    // checks above: tagged as the compiled call's handler tags it
    // (ffi_common.h Fail), so gearjax.table_error names it "failed" here too.
    throw InvalidArgument(std::string("INVALID_ARGUMENT: gearjax: ") + e.what());
  }
}

}  // namespace gearjax::python
