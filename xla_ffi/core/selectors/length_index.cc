// See length_index.h.
#include "core/selectors/length_index.h"

#include <cstddef>

namespace gearjax {

LengthIndex::LengthIndex(int64_t max_length)
    : max_length_(max_length),
      counts_(static_cast<size_t>(max_length + 1), 0),
      steps_tree_(static_cast<size_t>(max_length + 1), 0) {}

void LengthIndex::Add(int64_t length, int64_t sign) {
  count_ += sign;
  steps_ += sign * length;
  for (int64_t i = length; i <= max_length_; i += i & -i) {
    counts_[i] += sign;
    steps_tree_[i] += sign * length;
  }
}

int64_t LengthIndex::CountUpTo(int64_t l) const {
  int64_t sum = 0;
  for (int64_t i = l < max_length_ ? l : max_length_; i > 0; i -= i & -i) sum += counts_[i];
  return sum;
}

int64_t LengthIndex::StepsUpTo(int64_t l) const {
  int64_t sum = 0;
  for (int64_t i = l < max_length_ ? l : max_length_; i > 0; i -= i & -i) sum += steps_tree_[i];
  return sum;
}

int64_t LengthIndex::CountAtLeast(int64_t w) const { return count_ - CountUpTo(w - 1); }

int64_t LengthIndex::FullWindows(int64_t w) const {
  const int64_t steps = steps_ - StepsUpTo(w - 1);
  return steps - (w - 1) * CountAtLeast(w);
}

}  // namespace gearjax
