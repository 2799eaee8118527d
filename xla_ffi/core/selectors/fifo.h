// InsertionOrder: items in the order they were published, which is key order
// (keys increase with publication): the FIFO and LIFO removers' victims, and
// the items oldest first. Recent(n) draws by the same order, in recent.h.
#pragma once

#include <cstdint>
#include <vector>

#include "core/selectors/selector.h"

namespace gearjax {

// A doubly linked list over slots: O(1) to append, unlink, and find either end.
class InsertionOrder final : public Selector {
 public:
  explicit InsertionOrder(int64_t capacity);
  void Insert(const Item& item) override;
  void Delete(const Item& item) override;

  int64_t Oldest() const { return head_; }  // a slot, or -1 when empty
  int64_t Newest() const { return tail_; }
  // The slot after `slot` in insertion order, or -1.
  int64_t Next(int64_t slot) const { return next_[slot]; }
  // The slot before `slot` in insertion order, or -1.
  int64_t Previous(int64_t slot) const { return prev_[slot]; }

 private:
  std::vector<int32_t> prev_, next_;
  int64_t head_ = -1, tail_ = -1;
};

}  // namespace gearjax
