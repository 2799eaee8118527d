// Constrained draws: the exact host-side selection for samples the incremental
// selectors cannot answer alone. Three constraints need it:
//  * cut="full" windows (window.h): only trajectories of at least `window`
//    steps may be drawn, and Timestep weighs each by its number of full
//    windows, length - window + 1 (with replacement, Uniform and Timestep
//    usually draw these by rejection instead: Table::SelectFullLocked);
//  * draws without replacement (replace=False): a trajectory at most once per
//    batch;
//  * a draw budget per trajectory (the table's max_times_sampled): a
//    trajectory is drawn no more often than its remaining count, also within
//    one batch.
// The table lists the eligible live items as candidates, each with its
// strategy weight and its budget for this batch (O(size) per sample; see
// Table::Select). The rows are then drawn one after another, each in
// proportion to weight among the candidates whose budget is not yet spent; a
// candidate whose budget runs out leaves the draw. A row's probability is its
// candidate's weight over the total weight left when it was drawn: the true
// probability of that row given the rows before it (rows drawn with budgets
// are not independent; without budgets every row has the same distribution,
// weight / total).
#pragma once

#include <cstdint>
#include <vector>

#include "core/selectors/selector.h"
#include "core/selectors/sum_tree.h"

namespace gearjax {

// The sum of the candidates' budgets, saturating at `cap` (a batch never
// needs more than its size).
int64_t TotalBudget(const std::vector<Candidate>& candidates, int64_t cap);

// Draws n rows from the candidates with the uniforms u[0..n) in [0, 1), one
// after another, into out[0..n). The candidates' total budget must be >= n.
class ConstrainedDraw {
 public:
  void Draw(const std::vector<Candidate>& candidates, const double* u, int64_t n,
            Selection* out);

 private:
  std::vector<int64_t> left_;  // per candidate: draws left in its budget (scratch)
};

}  // namespace gearjax
