// The random words of a whole batch at once on the CPU: RowWords(seed, b) for
// b = 0..n-1 (random.h), eight rows per AVX2 instruction where the processor
// has it (cpu_simd.h), one row at a time otherwise. The words are the same at
// every level; only the speed differs.
#pragma once

#include <cstdint>

#include "random.h"

namespace gearjax {

// out[b] = RowWords(seed, b) for b in [0, n).
void RowWordsMany(const uint32_t seed[2], int64_t n, Words4* out);

}  // namespace gearjax
