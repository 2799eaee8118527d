// The uniform family (see uniform.h).
#include "core/selectors/uniform.h"

#include <vector>

namespace gearjax {

void WeightTreeSelector::SelectMany(const double* u, int64_t n, Selection* out) const {
  std::vector<int64_t> slots(static_cast<size_t>(n));
  weights_.DrawMany(u, n, slots.data());
  const double total = weights_.Total();
  for (int64_t i = 0; i < n; ++i) {
    out[i] = {slots[i], slots[i] < 0 ? 0.0 : weights_.Get(slots[i]) / total};
  }
}

}  // namespace gearjax
