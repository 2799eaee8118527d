// The insertion-order family (see fifo.h).
#include "core/selectors/fifo.h"

#include <algorithm>

namespace gearjax {

InsertionOrder::InsertionOrder(int64_t capacity)
    : prev_(static_cast<size_t>(capacity), -1), next_(static_cast<size_t>(capacity), -1) {}

void InsertionOrder::Insert(const Item& item) {
  const int32_t slot = static_cast<int32_t>(item.slot);
  prev_[slot] = static_cast<int32_t>(tail_);
  next_[slot] = -1;
  if (tail_ >= 0) {
    next_[tail_] = slot;
  } else {
    head_ = slot;
  }
  tail_ = slot;
}

void InsertionOrder::Delete(const Item& item) {
  const int64_t slot = item.slot, before = prev_[slot], after = next_[slot];
  if (before >= 0) {
    next_[before] = static_cast<int32_t>(after);
  } else {
    head_ = after;
  }
  if (after >= 0) {
    prev_[after] = static_cast<int32_t>(before);
  } else {
    tail_ = before;
  }
  prev_[slot] = next_[slot] = -1;
}

}  // namespace gearjax
