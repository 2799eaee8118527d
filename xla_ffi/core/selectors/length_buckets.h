// LengthBuckets: the live items listed by length, so that those shorter than
// w steps can be visited in O(w + their number) without scanning the table.
// What a cut="full" Prioritized sample with replacement needs to normalise
// draws it keeps by rejection: the weight of the items it may draw is its
// tree's total less the weight of the shorter ones (Table::SelectFullLocked).
// Made on the first such sample, so tables that never take one pay nothing.
// One intrusive doubly linked list per length: 8 bytes a slot (slots fit
// int32: kMaxCapacity) and 4 bytes a length, all made at once (an insert
// allocates nothing: it must not fail half-way through the selectors).
#pragma once

#include <cstdint>
#include <vector>

#include "core/selectors/selector.h"

namespace gearjax {

class LengthBuckets final : public Selector {
 public:
  LengthBuckets(int64_t capacity, int64_t max_length);
  void Insert(const Item& item) override;
  void Delete(const Item& item) override;

  // Calls visit(slot) for every live item of fewer than w steps, shortest
  // first (within a length, the most recently inserted first).
  template <typename Visit>
  void ForEachShorter(int64_t w, Visit&& visit) const {
    const int64_t lengths = w < static_cast<int64_t>(heads_.size())
                                ? w
                                : static_cast<int64_t>(heads_.size());
    for (int64_t length = 0; length < lengths; ++length) {
      for (int32_t slot = heads_[static_cast<size_t>(length)]; slot >= 0;
           slot = next_[static_cast<size_t>(slot)]) {
        visit(static_cast<int64_t>(slot));
      }
    }
  }

 private:
  static constexpr int32_t kNone = -1;
  std::vector<int32_t> heads_;        // per length 0..max_length: its first item's slot, or kNone
  std::vector<int32_t> next_, prev_;  // per slot: its neighbours in its length's list
};

}  // namespace gearjax
