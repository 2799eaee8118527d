// MinPriorityHeap: the min-priority remover's victim (the lowest priority,
// the oldest among ties). TopK(k) ranks priorities too, in topk.h.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/selectors/selector.h"

namespace gearjax {

// An indexed binary min-heap on (priority, key): O(1) to find the minimum,
// O(log N) to insert, delete or change a priority.
class MinPriorityHeap final : public Selector {
 public:
  explicit MinPriorityHeap(int64_t capacity);
  void Insert(const Item& item) override;
  void Delete(const Item& item) override;
  bool UsesPriority() const override { return true; }
  void UpdatePriorities(const Item* before, const double* priorities, int64_t n) override;

  int64_t size() const { return static_cast<int64_t>(heap_.size()); }
  int64_t Min() const { return heap_.empty() ? -1 : heap_[0].slot; }  // a slot, or -1

 private:
  struct Entry {
    double priority;
    int64_t key;
    int64_t slot;
    bool operator<(const Entry& o) const {
      return priority < o.priority || (priority == o.priority && key < o.key);
    }
  };
  void Place(int64_t i, const Entry& e);
  void SiftUp(int64_t i);
  void SiftDown(int64_t i);
  void Restore(int64_t i);  // after heap_[i] changed either way

  std::vector<Entry> heap_;
  std::vector<int64_t> position_;  // slot -> index in heap_, or -1
};

}  // namespace gearjax
