// Uniform() (see uniform.h).
#include "core/selectors/uniform.h"

#include <vector>

#include "core/gpu/gpu_selection.h"
#include "core/selectors/candidate_scan.h"

namespace gearjax {

UniformSelector::UniformSelector(int64_t capacity, bool gpu_mapped)
    : capacity_(capacity),
      live_(static_cast<size_t>((capacity + 63) / 64), gpu_mapped),
      ones_(capacity, gpu_mapped) {}

void UniformSelector::Insert(const Item& item) {
  live_[item.slot >> 6] |= uint64_t{1} << (item.slot & 63);
  ones_.Set(item.slot, 1.0);
  ++size_;
}

void UniformSelector::Delete(const Item& item) {
  live_[item.slot >> 6] &= ~(uint64_t{1} << (item.slot & 63));
  ones_.Set(item.slot, 0.0);
  --size_;
}

void UniformSelector::SelectMany(const SelectionBatch& batch, Selection* out) const {
  const UniformView v = view();
  const double probability = 1.0 / static_cast<double>(size_);
  for (int64_t b = 0; b < batch.n; ++b) {
    out[b] = {UniformDraw(v, batch.seed, b, batch.u[b]), probability};
  }
}

bool UniformSelector::DescribeForGpu(GpuSelection* selection) const {
  selection->uniform = true;
  selection->live = device_view();
  if (selection->live.live == nullptr || selection->live.ones.nodes == nullptr) {
    throw InvalidArgument("the live-slot bitmap is not GPU-mapped");
  }
  return true;
}

void UniformSelector::ListCandidates(const CandidateScan& scan,
                                     std::vector<Candidate>* out) const {
  ListInSlotOrder(scan, [](int64_t, const SlotInfo&) { return 1.0; }, out);
}

}  // namespace gearjax
