// Tests of RowWordsMany: at every SIMD level, exactly RowWords for every row
// of batches of every length around the eight-row blocks, for seeds at the
// edges of their words.
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

}  // namespace
}  // namespace gearjax
