// Inserting N padded trajectories in one call ([N, T, *step] per column, the
// first lengths[i] steps of row i real): insert_batch's body, shared by its
// CPU and CUDA FFI handlers (ffi_common.h InsertBatchRows) and the Python
// module's eager insert_batch, which differ only in where the column bytes
// are and how they are copied into the slots.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/common.h"
#include "core/table/table.h"

namespace gearjax {

// One column's bytes, [N, T, *step], as the caller holds them.
struct ColumnSource {
  const uint8_t* data;
  size_t bytes;
};

// One column's part of copying a trajectory into its slot: `bytes` bytes from
// `src` (the caller's buffer) to arena offset `dst_offset`.
struct ColumnCopy {
  size_t dst_offset;
  const uint8_t* src;
  size_t bytes;
};

// insert_batch after its lengths and priorities are read: checks the keys
// result, the column buffers ([rows, steps, *step] each) and every length and
// priority before the first insert, so bad input inserts nothing; then inserts
// through Table::InsertManyWith, `copy` writing every column of a whole chunk
// of rows into their reserved slots in one call (the CUDA handler enqueues
// them all and synchronises once). Only a rate-limiter timeout, a close or a
// failed copy can stop it part-way; the error then says how many went in.
inline std::string Progress(int64_t inserted, int64_t rows) {
  return " (insert_batch stopped after inserting " + std::to_string(inserted) + " of " +
         std::to_string(rows) + " trajectories)";
}

inline void InsertRows(Table& table, int64_t rows, int64_t steps,
                       const std::vector<ColumnSource>& columns, size_t key_count,
                       const std::vector<int64_t>& lengths, const std::vector<double>& priorities,
                       const std::function<void(const std::vector<ColumnCopy>&)>& copy,
                       int64_t* keys) {
  const int num_columns = table.num_columns();
  if (static_cast<int64_t>(key_count) != rows || static_cast<int64_t>(lengths.size()) != rows ||
      static_cast<int64_t>(priorities.size()) != rows) {
    throw InvalidArgument("lengths, priorities and keys must have one entry per trajectory");
  }
  if (columns.size() != static_cast<size_t>(num_columns)) {
    throw InvalidArgument("expected " + std::to_string(num_columns) + " column arrays, got " +
                          std::to_string(columns.size()));
  }
  if (steps < 1 || steps > table.spec().max_length) {
    throw InvalidArgument("the time axis (" + std::to_string(steps) +
                          ") must be in [1, max_length]");
  }
  std::vector<const uint8_t*> bases;
  for (int c = 0; c < num_columns; ++c) {
    if (static_cast<int64_t>(columns[c].bytes) != rows * steps * table.step_bytes(c)) {
      throw InvalidArgument("column '" + table.spec().columns[c].name + "' has the wrong size");
    }
    bases.push_back(columns[c].data);
  }
  for (int64_t i = 0; i < rows; ++i) {
    if (lengths[i] < 1 || lengths[i] > steps) {
      throw InvalidArgument("trajectory " + std::to_string(i) + " has length " +
                            std::to_string(lengths[i]) + ", outside [1, " +
                            std::to_string(steps) + "]; nothing was inserted");
    }
    if (!ValidPriority(priorities[i])) {
      try {
        CheckPriority(priorities[i], "the priority of trajectory " + std::to_string(i));
      } catch (const InvalidArgument& e) {
        throw InvalidArgument(std::string(e.what()) + "; nothing was inserted");
      }
    }
  }
  std::vector<ColumnCopy> copies;
  auto fill = [&](int64_t first, const int64_t* slots, int64_t count) {
    copies.clear();
    for (int64_t j = 0; j < count; ++j) {
      const int64_t i = first + j;
      for (int c = 0; c < num_columns; ++c) {
        const int64_t step_bytes = table.step_bytes(c);
        copies.push_back({table.StepOffset(c, slots[j], 0), bases[c] + i * steps * step_bytes,
                          static_cast<size_t>(lengths[i] * step_bytes)});
      }
    }
    copy(copies);
  };
  int64_t inserted = 0;
  try {
    table.InsertManyWith(rows, lengths.data(), priorities.data(), fill, keys, &inserted);
  } catch (const Timeout& e) {
    throw Timeout(std::string(e.what()) + Progress(inserted, rows));
  } catch (const Closed& e) {
    throw Closed(std::string(e.what()) + Progress(inserted, rows));
  } catch (const Interrupted& e) {
    throw Interrupted(std::string(e.what()) + Progress(inserted, rows));
  } catch (const std::exception& e) {
    if (inserted == 0) throw;
    throw std::runtime_error(e.what() + Progress(inserted, rows));
  }
}

}  // namespace gearjax
