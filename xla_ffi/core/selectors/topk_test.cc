// Tests of TopK(k): the k highest, ties to the newer, after priority updates.
#include "core/selectors/topk.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace gearjax {
namespace {

TEST(TopKSelector, DrawsTheKHighestWithTiesToTheNewer) {
  TopKSelector topk;
  topk.Insert({0, 0, 1, 5.0});
  topk.Insert({1, 1, 1, 9.0});
  topk.Insert({2, 2, 1, 5.0});  // ties with key 0 but is newer
  topk.Insert({3, 3, 1, 1.0});
  std::set<int64_t> drawn;
  for (int i = 0; i < 100; ++i) drawn.insert(topk.Select((i + 0.5) / 100, 2).slot);
  EXPECT_EQ(drawn, (std::set<int64_t>{1, 2}));
  const Item before{3, 3, 1, 1.0};
  const double raised = 10.0;
  topk.UpdatePriorities(&before, &raised, 1);
  drawn.clear();
  for (int i = 0; i < 100; ++i) drawn.insert(topk.Select((i + 0.5) / 100, 2).slot);
  EXPECT_EQ(drawn, (std::set<int64_t>{1, 3}));
  EXPECT_DOUBLE_EQ(topk.Select(0.1, 100).probability, 0.25);
}

}  // namespace
}  // namespace gearjax
