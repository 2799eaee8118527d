// Turning a random seed into per-row draws. The seed (two 32-bit words) is
// the JAX rng key's own data (gearjax/table.py, _seed_words), so the same key
// gives the same batch; every row then gets four words from Philox4x32-10 (Salmon et al.,
// SC'11), a counter-based generator keyed by the seed with the row as counter.
// Written here rather than taken from a library because the very same function
// must run in CPU and CUDA code; it is checked against the published
// known-answer vectors (tests/test_native.py). Expanding in native code is
// much cheaper than asking XLA's CPU threefry for four words per row.
#pragma once

#include <cstdint>

#include "core/common.h"

namespace gearjax {

struct Words4 {
  uint32_t w[4];
};

GEARJAX_HD Words4 Philox4x32x10(Words4 counter, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t* c = counter.w;
  GEARJAX_UNROLL
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += kW0;
      key1 += kW1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    const Words4 next{{hi1 ^ c[1] ^ key0, lo1, hi0 ^ c[3] ^ key1, lo0}};
    counter = next;
  }
  return counter;
}

// Four random words of sampled row `row`, attempt `attempt`: the counter is
// (row, attempt), so every row and every retry of a row (see uniform.h) gets
// its own words.
GEARJAX_HD Words4 AttemptWords(const uint32_t seed[2], int64_t row, uint32_t attempt) {
  const uint64_t r = static_cast<uint64_t>(row);
  return Philox4x32x10(
      Words4{{static_cast<uint32_t>(r), static_cast<uint32_t>(r >> 32), attempt, 0}}, seed[0],
      seed[1]);
}

// The row whose words a row's redraw number `redraw` (>= 1) uses when a whole
// draw must be repeated (GPU rows that met the table mid-change, cut="full"
// rows whose window does not fit): rows counted from 2^40 up, which no first
// draw reaches (batches stay below 2^31 rows), so redraws never share words
// with any row's own.
GEARJAX_HD int64_t RedrawRow(int64_t row, uint32_t redraw) {
  return redraw == 0 ? row : (int64_t{1} << 40) * redraw + row;
}

// The four random words of sampled row `row`: two for the trajectory draw
// (53-bit uniform) and two for the window start (64-bit integer draw).
GEARJAX_HD Words4 RowWords(const uint32_t seed[2], int64_t row) {
  return AttemptWords(seed, row, 0);
}

// A uniform double in [0, 1) from 53 of the 64 bits in (hi, lo).
GEARJAX_HD double UniformFromBits(uint32_t hi, uint32_t lo) {
  const uint64_t word = (static_cast<uint64_t>(hi) << 32) | lo;
  return static_cast<double>(word >> 11) * 0x1.0p-53;
}

// An integer in [0, n) from 64 bits by multiply-shift. The bias is at most
// n / 2^64, far below anything a test or a training run can observe.
GEARJAX_HD uint64_t BelowFromBits(uint32_t hi, uint32_t lo, uint64_t n) {
  const uint64_t word = (static_cast<uint64_t>(hi) << 32) | lo;
#if defined(__CUDA_ARCH__)
  return __umul64hi(word, n);
#else
  return static_cast<uint64_t>((static_cast<unsigned __int128>(word) * n) >> 64);
#endif
}

}  // namespace gearjax
