// Tests of LengthBuckets against a brute-force listing after random inserts
// and deletes.
#include "core/selectors/length_buckets.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace gearjax {
namespace {

TEST(LengthBuckets, VisitsExactlyTheItemsShorterThanW) {
  const int64_t capacity = 64, max_length = 40;
  LengthBuckets buckets(capacity, max_length);
  std::mt19937_64 rng(5);
  std::vector<Item> live;
  std::vector<int64_t> free_slots;
  for (int64_t s = capacity - 1; s >= 0; --s) free_slots.push_back(s);
  for (int step = 0; step < 3000; ++step) {
    if (!free_slots.empty() && (live.empty() || rng() % 3 != 0)) {
      const Item item{free_slots.back(), step, 1 + static_cast<int64_t>(rng() % max_length), 1.0};
      free_slots.pop_back();
      buckets.Insert(item);
      live.push_back(item);
    } else {
      const size_t i = rng() % live.size();
      buckets.Delete(live[i]);
      free_slots.push_back(live[i].slot);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if (step % 53 != 0) continue;
    for (int64_t w = 0; w <= max_length + 2; ++w) {
      std::vector<int64_t> expected, visited;
      for (const Item& item : live) {
        if (item.length < w) expected.push_back(item.slot);
      }
      int64_t last_length = 0;
      buckets.ForEachShorter(w, [&](int64_t slot) {
        visited.push_back(slot);
        const auto it = std::find_if(live.begin(), live.end(),
                                     [&](const Item& item) { return item.slot == slot; });
        ASSERT_NE(it, live.end()) << "visited a slot not live: " << slot;
        EXPECT_GE(it->length, last_length) << "not shortest first";
        last_length = it->length;
      });
      std::sort(expected.begin(), expected.end());
      std::sort(visited.begin(), visited.end());
      ASSERT_EQ(visited, expected) << "w=" << w << " step=" << step;
    }
  }
}

TEST(LengthBuckets, AnEmptyTableAndAWindowPastEveryLengthVisitNothingTwice) {
  LengthBuckets buckets(4, 5);
  int visits = 0;
  buckets.ForEachShorter(1000, [&](int64_t) { ++visits; });
  EXPECT_EQ(visits, 0);
  buckets.Insert({3, 7, 5, 1.0});
  buckets.Insert({0, 8, 5, 1.0});
  buckets.ForEachShorter(5, [&](int64_t) { ++visits; });
  EXPECT_EQ(visits, 0);
  buckets.ForEachShorter(int64_t{1} << 40, [&](int64_t) { ++visits; });
  EXPECT_EQ(visits, 2);
  buckets.Delete({3, 7, 5, 1.0});
  buckets.Delete({0, 8, 5, 1.0});
  buckets.ForEachShorter(6, [&](int64_t) { ++visits; });
  EXPECT_EQ(visits, 2);
}

}  // namespace
}  // namespace gearjax
