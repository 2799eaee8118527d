// Tests of LengthIndex against a brute-force count after random inserts and
// deletes.
#include "core/selectors/length_index.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace gearjax {
namespace {

TEST(LengthIndex, CountsAndFullWindowsMatchABruteForceSum) {
  const int64_t max_length = 50;
  LengthIndex index(max_length);
  std::mt19937_64 rng(3);
  std::vector<Item> live;
  for (int step = 0; step < 2000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      const Item item{static_cast<int64_t>(live.size()), step,
                      1 + static_cast<int64_t>(rng() % max_length), 1.0};
      index.Insert(item);
      live.push_back(item);
    } else {
      const size_t i = rng() % live.size();
      index.Delete(live[i]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if (step % 97 != 0) continue;
    for (int64_t w = 1; w <= max_length + 1; ++w) {
      int64_t count = 0, windows = 0;
      for (const Item& item : live) {
        if (item.length >= w) {
          ++count;
          windows += item.length - w + 1;
        }
      }
      ASSERT_EQ(index.CountAtLeast(w), count) << "w=" << w;
      ASSERT_EQ(index.FullWindows(w), windows) << "w=" << w;
    }
  }
}

}  // namespace
}  // namespace gearjax
