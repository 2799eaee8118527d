// One step of Python values (a number, or an array of exactly the column's
// dtype and shape, for each column) to the columns' bytes, without NumPy's
// per-value overhead: the fast path of Table.insert_step and Writer.append.
//
// It takes only what it can convert exactly as the general Python path would
// (gearjax/columns.py cast_to_column): Python bools, ints and floats
// (numpy.float64 included) into scalar columns whose conversion NumPy allows
// without loss of kind, NumPy scalars likewise, and NumPy arrays of the
// column's own dtype and shape. Anything else (JAX arrays, other dtypes, values out of
// range, a float that would overflow float32) makes ConvertStep return false
// and write nothing: the caller then takes the general path, which converts or
// refuses with the same rules and a clear error.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <vector>

namespace gearjax {

// A column's element type and per-step shape, for the fast path.
struct StepFormat {
  char kind = 0;         // NumPy's dtype.kind: 'b', 'i', 'u' or 'f'; 0: no fast path
  int itemsize = 0;      // bytes per element: 1, 2, 4 or 8 ('f': 4 or 8)
  std::vector<int64_t> shape;
  int64_t elements = 1;  // the product of shape
  int64_t bytes() const { return elements * itemsize; }
};

// A column's name (a Python str, for dict lookups) and step format.
struct StepColumn {
  nanobind::object name;
  StepFormat format;
};

// Converts `step` (a dict with exactly the columns' names as keys) into `out`
// (the columns' step bytes, one after another, in column order); false,
// writing nothing, when the step or any value is not for the fast path.
bool ConvertStep(nanobind::handle step, const std::vector<StepColumn>& columns,
                 std::vector<uint8_t>& out);

}  // namespace gearjax
