// Sums and draws over a contiguous range of a sum tree's leaves (sum_tree.h),
// in O(8 * levels) node reads: the range splits into at most 14 whole nodes a
// level (the partial lines at its two ends), read left to right. What a step
// tree needs (selectors/step_prioritized.h): a trajectory's steps are a run
// of leaves, and a full window may start only at the first length - window + 1
// of them.
#pragma once

#include <cstdint>

#include "core/selectors/sum_tree.h"

namespace gearjax {

// The sum of leaves [lo, hi) (0 when the range is empty).
double SumTreeRangeSum(const SumTreeView& t, int64_t lo, int64_t hi);

// The leaf in [lo, hi) whose cumulative-weight interval within the range
// holds u * SumTreeRangeSum(t, lo, hi), u in [0, 1): each leaf in proportion
// to its weight, never one of weight 0; -1 when the range's weights are all 0.
int64_t SumTreeDrawInRange(const SumTreeView& t, int64_t lo, int64_t hi, double u);

}  // namespace gearjax
