// See constrained.h.
#include "core/selectors/constrained.h"

#include <algorithm>
#include <stdexcept>

namespace gearjax {

int64_t TotalBudget(const std::vector<Candidate>& candidates, int64_t cap) {
  int64_t total = 0;
  for (const Candidate& c : candidates) {
    total += std::min(c.budget, cap);
    if (total >= cap) return cap;
  }
  return total;
}

void ConstrainedDraw::Draw(const std::vector<Candidate>& candidates, const double* u, int64_t n,
                           Selection* out) {
  if (TotalBudget(candidates, n) < n) {
    throw std::logic_error("gearjax: constrained draw of more rows than the budgets allow (a bug)");
  }
  const int64_t m = static_cast<int64_t>(candidates.size());
  // A sum tree over the candidates (the same tree the selectors use, on the
  // host): O(m) to fill, O(log m) per row and per candidate leaving.
  SumTree tree(m, /*gpu_mapped=*/false);
  std::vector<int64_t> leaves(static_cast<size_t>(m));
  std::vector<double> weights(static_cast<size_t>(m));
  left_.resize(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) {
    leaves[i] = i;
    weights[i] = candidates[i].weight;
    left_[i] = candidates[i].budget;
  }
  tree.SetMany(leaves.data(), weights.data(), m);
  for (int64_t b = 0; b < n; ++b) {
    const int64_t i = tree.Draw(u[b]);
    if (i < 0) throw std::logic_error("gearjax: constrained draw found no candidate (a bug)");
    out[b] = {candidates[i].slot, candidates[i].weight / tree.Total()};
    if (--left_[i] == 0) tree.Set(i, 0.0);
  }
}

}  // namespace gearjax
