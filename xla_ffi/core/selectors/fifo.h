// The insertion-order family: items in the order they were published, which is
// key order (keys increase with publication). InsertionOrder gives the FIFO
// and LIFO removers their victims and lists items oldest first; RecentSelector
// draws uniformly over the n newest (Recent(n)).
#pragma once

#include <cstdint>
#include <vector>

#include "core/selectors/order_statistics.h"
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

// Order statistics over keys: the r-th newest item in O(log N).
class RecentSelector final : public SamplingSelector {
 public:
  void Insert(const Item& item) override;
  void Delete(const Item& item) override;

  int64_t size() const { return static_cast<int64_t>(by_key_.size()); }
  // Uniform over the min(n, size) newest items (n >= 1; the table is not empty).
  Selection Select(double u, int64_t n) const;
  // Select for each row, with batch.count as `n`.
  void SelectMany(const SelectionBatch& batch, Selection* out) const override;
  // The slots of the min(n, size) newest, the newest first.
  std::vector<int64_t> Newest(int64_t n) const;

 private:
  OrderStatistics<int64_t> by_key_;  // key -> slot
};

}  // namespace gearjax
