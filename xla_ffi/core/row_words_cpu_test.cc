// Tests of RowWordsMany: at every SIMD level, exactly RowWords for every row
// of batches of every length around the eight-row blocks, for seeds at the
// edges of their words, and for runs that start at any row.
#include "core/row_words_cpu.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/cpu_simd.h"

namespace gearjax {
namespace {

TEST(RowWordsMany, EveryLevelGivesRowWordsForEveryRow) {
  const uint32_t seeds[][2] = {{0, 0}, {0xFFFFFFFFu, 0xFFFFFFFFu}, {42, 7}, {0x9E3779B9u, 1}};
  for (SimdLevel level : {SimdLevel::kBaseline, SimdLevel::kAvx2}) {
    const ScopedSimdLevel pin(level);
    for (const auto& seed : seeds) {
      for (int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 255, 256, 1000}) {
        // One row past the batch, to see that nothing beyond it is written.
        std::vector<Words4> out(static_cast<size_t>(n) + 1, Words4{{1, 2, 3, 4}});
        RowWordsMany(seed, n, out.data());
        for (int64_t b = 0; b < n; ++b) {
          const Words4 want = RowWords(seed, b);
          for (int w = 0; w < 4; ++w) {
            ASSERT_EQ(out[b].w[w], want.w[w]) << "level " << static_cast<int>(level) << " n=" << n
                                              << " row " << b << " word " << w;
          }
        }
        EXPECT_EQ(out[n].w[0], 1u);
        EXPECT_EQ(out[n].w[3], 4u);
      }
    }
  }
}

// Runs that start anywhere: before, at and after multiples of 8, and past
// the 2^32 rows where a row's counter gets a high word.
TEST(RowWordsMany, RunsStartingAtAnyRowGiveThatRowsWords) {
  const uint32_t seed[2] = {3, 9};
  const int64_t high = int64_t{1} << 32;
  for (SimdLevel level : {SimdLevel::kBaseline, SimdLevel::kAvx2}) {
    const ScopedSimdLevel pin(level);
    for (int64_t first : {int64_t{1}, int64_t{5}, int64_t{7}, int64_t{8}, int64_t{13},
                          int64_t{256}, high - 3, high, high + 8}) {
      for (int64_t n : {0, 1, 2, 9, 30}) {
        std::vector<Words4> out(static_cast<size_t>(n) + 1, Words4{{1, 2, 3, 4}});
        RowWordsMany(seed, first, n, out.data());
        for (int64_t i = 0; i < n; ++i) {
          const Words4 want = RowWords(seed, first + i);
          for (int w = 0; w < 4; ++w) {
            ASSERT_EQ(out[i].w[w], want.w[w]) << "level " << static_cast<int>(level)
                                              << " first " << first << " i " << i;
          }
        }
        EXPECT_EQ(out[n].w[0], 1u);
      }
    }
  }
}

}  // namespace
}  // namespace gearjax
