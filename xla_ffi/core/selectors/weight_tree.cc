// Selection in proportion to a weight per live item (see weight_tree.h).
#include "core/selectors/weight_tree.h"

#include "core/common.h"
#include "core/gpu/gpu_selection.h"
#include "core/selectors/candidate_scan.h"

namespace gearjax {

void WeightTreeSelector::SelectMany(const SelectionBatch& batch, Selection* out) const {
  drawn_.resize(static_cast<size_t>(batch.n));
  weights_.DrawMany(batch.u, batch.n, drawn_.data(), batch.then);
  const double total = weights_.Total();
  for (int64_t i = 0; i < batch.n; ++i) {
    out[i] = {drawn_[i], drawn_[i] < 0 ? 0.0 : weights_.Get(drawn_[i]) / total};
  }
}

bool WeightTreeSelector::DescribeForGpu(GpuSelection* selection) const {
  selection->uniform = false;
  selection->tree = weights_.device_view();
  if (selection->tree.nodes == nullptr) throw InvalidArgument("the sum tree is not GPU-mapped");
  return true;
}

void WeightTreeSelector::ListCandidates(const CandidateScan& scan,
                                        std::vector<Candidate>* out) const {
  ListInSlotOrder(scan, [this](int64_t slot, const SlotInfo&) { return weights_.Get(slot); }, out);
}

}  // namespace gearjax
