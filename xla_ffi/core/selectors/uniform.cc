// The uniform family (see uniform.h).
#include "core/selectors/uniform.h"

#include <vector>

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

void UniformSelector::SelectMany(const uint32_t seed[2], const double* u, int64_t n,
                                 Selection* out) const {
  const UniformView v = view();
  const double probability = 1.0 / static_cast<double>(size_);
  for (int64_t b = 0; b < n; ++b) out[b] = {UniformDraw(v, seed, b, u[b]), probability};
}

}  // namespace gearjax
