// Range sums and draws over a sum tree (see sum_tree_range.h).
#include "core/selectors/sum_tree_range.h"

#include <algorithm>

namespace gearjax {
namespace {

struct Node {
  int32_t level;
  int64_t index;  // within its level
};

double Weight(const SumTreeView& t, Node n) { return t.nodes[t.offsets[n.level] + n.index]; }

// The whole nodes that cover [lo, hi), left to right; returns how many.
// At most 2 * 7 a level: the partial lines at the two ends.
int Cover(const SumTreeView& t, int64_t lo, int64_t hi, Node* out) {
  Node left[2 * kSumTreeFanout * kSumTreeMaxLevels];
  Node right[2 * kSumTreeFanout * kSumTreeMaxLevels];
  int nl = 0, nr = 0;
  for (int32_t level = 0; level < t.levels && lo < hi; ++level) {
    while (lo < hi && lo % kSumTreeFanout != 0) left[nl++] = {level, lo++};
    while (lo < hi && hi % kSumTreeFanout != 0) right[nr++] = {level, --hi};
    lo /= kSumTreeFanout;
    hi /= kSumTreeFanout;
  }
  // Right parts were taken from the right end inward, lower levels first:
  // reversed, they run left to right after the left parts.
  std::copy(left, left + nl, out);
  std::reverse_copy(right, right + nr, out + nl);
  return nl + nr;
}

}  // namespace

double SumTreeRangeSum(const SumTreeView& t, int64_t lo, int64_t hi) {
  Node cover[4 * kSumTreeFanout * kSumTreeMaxLevels];
  const int n = Cover(t, lo, hi, cover);
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += Weight(t, cover[i]);
  return sum;
}

int64_t SumTreeDrawInRange(const SumTreeView& t, int64_t lo, int64_t hi, double u) {
  Node cover[4 * kSumTreeFanout * kSumTreeMaxLevels];
  const int n = Cover(t, lo, hi, cover);
  double total = 0.0;
  for (int i = 0; i < n; ++i) total += Weight(t, cover[i]);
  double target = u * total;
  int chosen = -1;
  for (int i = 0; i < n; ++i) {
    const double w = Weight(t, cover[i]);
    if (w <= 0.0) continue;
    chosen = i;  // rounding past the last: the last positive node
    if (target < w) break;
    target -= w;
  }
  if (chosen < 0) return -1;
  Node node = cover[chosen];
  target = std::min(target, Weight(t, node));
  for (; node.level > 0; --node.level) {
    const double* line = t.nodes + t.offsets[node.level - 1] + node.index * kSumTreeFanout;
    const int c = SumTreeChild(line, &target);
    if (c < 0) return -1;
    node.index = node.index * kSumTreeFanout + c;
  }
  return Weight(t, node) > 0.0 ? node.index : -1;
}

}  // namespace gearjax
