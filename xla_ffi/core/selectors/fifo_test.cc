// Tests of insertion order (FIFO/LIFO victims, key order).
#include "core/selectors/fifo.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

namespace gearjax {
namespace {

Item ItemAt(int64_t slot, int64_t key) { return {slot, key, 1, 1.0}; }

std::vector<int64_t> Walk(const InsertionOrder& order) {
  std::vector<int64_t> slots;
  for (int64_t s = order.Oldest(); s >= 0; s = order.Next(s)) slots.push_back(s);
  return slots;
}

TEST(InsertionOrder, KeepsPublicationOrderThroughRemovals) {
  InsertionOrder order(8);
  EXPECT_EQ(order.Oldest(), -1);
  EXPECT_EQ(order.Newest(), -1);
  for (int64_t s : {5, 2, 7, 0}) order.Insert(ItemAt(s, 0));
  EXPECT_EQ(Walk(order), (std::vector<int64_t>{5, 2, 7, 0}));
  order.Delete(ItemAt(2, 0));   // middle
  order.Delete(ItemAt(5, 0));   // head
  order.Delete(ItemAt(0, 0));   // tail
  EXPECT_EQ(Walk(order), (std::vector<int64_t>{7}));
  EXPECT_EQ(order.Oldest(), 7);
  EXPECT_EQ(order.Newest(), 7);
  order.Insert(ItemAt(2, 0));   // a slot comes back at the end
  EXPECT_EQ(Walk(order), (std::vector<int64_t>{7, 2}));
  order.Delete(ItemAt(7, 0));
  order.Delete(ItemAt(2, 0));
  EXPECT_EQ(order.Oldest(), -1);
}

}  // namespace
}  // namespace gearjax
