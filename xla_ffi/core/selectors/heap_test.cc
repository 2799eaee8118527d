// Tests of the min-priority heap against a brute-force minimum under random
// operations.
#include "core/selectors/heap.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <vector>

namespace gearjax {
namespace {

TEST(MinPriorityHeap, AlwaysHoldsTheLowestPriorityOldestFirst) {
  const int64_t capacity = 200;
  MinPriorityHeap heap(capacity);
  std::map<int64_t, Item> live;  // slot -> item
  std::mt19937_64 rng(11);
  int64_t next_key = 0;
  for (int step = 0; step < 20000; ++step) {
    const int64_t slot = static_cast<int64_t>(rng() % capacity);
    const double priority = static_cast<double>(rng() % 8);  // many ties
    auto it = live.find(slot);
    if (it == live.end()) {
      Item item{slot, next_key++, 1, priority};
      heap.Insert(item);
      live[slot] = item;
    } else if (rng() % 2) {
      heap.Delete(it->second);
      live.erase(it);
    } else {
      const Item before = it->second;
      heap.UpdatePriorities(&before, &priority, 1);
      it->second.priority = priority;
    }
    int64_t expected = -1;
    for (const auto& [s, item] : live) {
      if (expected < 0 || item.priority < live[expected].priority ||
          (item.priority == live[expected].priority && item.key < live[expected].key)) {
        expected = s;
      }
    }
    ASSERT_EQ(heap.Min(), expected) << "step " << step;
    ASSERT_EQ(heap.size(), static_cast<int64_t>(live.size()));
  }
}

}  // namespace
}  // namespace gearjax
