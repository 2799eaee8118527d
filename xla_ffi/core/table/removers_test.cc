// Tests of the removers' victim choice.
#include "core/table/removers.h"

#include <gtest/gtest.h>

#include "core/common.h"

namespace gearjax {
namespace {

TEST(Removers, ChooseTheOldestTheNewestOrTheLowestPriority) {
  InsertionOrder order(8);
  MinPriorityHeap heap(8);
  const Item items[] = {{4, 40, 1, 3.0}, {1, 41, 1, 0.5}, {6, 42, 1, 0.5}, {2, 43, 1, 9.0}};
  for (const Item& item : items) {
    order.Insert(item);
    heap.Insert(item);
  }
  EXPECT_EQ(ChooseVictim(Remover::kFifo, order, nullptr), 4);
  EXPECT_EQ(ChooseVictim(Remover::kLifo, order, nullptr), 2);
  EXPECT_EQ(ChooseVictim(Remover::kMinPriority, order, &heap), 1);  // the older of the ties
  InsertionOrder empty(8);
  EXPECT_EQ(ChooseVictim(Remover::kFifo, empty, nullptr), -1);
}

TEST(Removers, RefuseUnknownValues) {
  EXPECT_EQ(CheckRemover(2), Remover::kMinPriority);
  EXPECT_THROW(CheckRemover(3), InvalidArgument);
  EXPECT_THROW(CheckRemover(-1), InvalidArgument);
}

}  // namespace
}  // namespace gearjax
