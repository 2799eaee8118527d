// LengthIndex: how many live trajectories have at least w steps, and how many
// steps they hold, for any w, in O(log max_length). What cut="full" sampling
// with replacement needs to normalise its draws without listing the table
// (Table::Select): Uniform over the eligible items has probability
// 1 / CountAtLeast(w), Timestep over full windows (L - w + 1) / FullWindows(w).
// Two Fenwick trees over lengths 1..max_length of int64 counts and step sums:
// exact integers, so no drift however many inserts and evictions.
#pragma once

#include <cstdint>
#include <vector>

#include "core/selectors/selector.h"

namespace gearjax {

class LengthIndex final : public Selector {
 public:
  explicit LengthIndex(int64_t max_length);
  void Insert(const Item& item) override { Add(item.length, 1); }
  void Delete(const Item& item) override { Add(item.length, -1); }

  // Live items of at least w steps (w >= 1).
  int64_t CountAtLeast(int64_t w) const;
  // Full windows of w steps over those items: the sum of (length - w + 1).
  int64_t FullWindows(int64_t w) const;

 private:
  void Add(int64_t length, int64_t sign);
  // Sums over lengths 1..l.
  int64_t CountUpTo(int64_t l) const;
  int64_t StepsUpTo(int64_t l) const;

  int64_t max_length_;
  int64_t count_ = 0, steps_ = 0;
  std::vector<int64_t> counts_, steps_tree_;  // Fenwick trees, index = length
};

}  // namespace gearjax
