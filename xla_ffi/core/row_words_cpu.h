// The random words of many rows at once on the CPU: RowWords(seed, b) for a
// run of rows b (random.h), eight rows per AVX2 instruction where the processor
// has it (cpu_simd.h), one row at a time otherwise. The words are the same at
// every level; only the speed differs.
#pragma once

#include <cstdint>

#include "core/random.h"

namespace gearjax {

// out[i] = RowWords(seed, first + i) for i in [0, n); first >= 0.
void RowWordsMany(const uint32_t seed[2], int64_t first, int64_t n, Words4* out);

// The same for rows 0 .. n - 1.
inline void RowWordsMany(const uint32_t seed[2], int64_t n, Words4* out) {
  RowWordsMany(seed, 0, n, out);
}

}  // namespace gearjax
