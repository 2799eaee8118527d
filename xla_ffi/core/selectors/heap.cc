// The priority-order family (see heap.h).
#include "core/selectors/heap.h"

#include <algorithm>

namespace gearjax {

MinPriorityHeap::MinPriorityHeap(int64_t capacity) : position_(static_cast<size_t>(capacity), -1) {
  heap_.reserve(static_cast<size_t>(capacity));
}

void MinPriorityHeap::Place(int64_t i, const Entry& e) {
  heap_[i] = e;
  position_[e.slot] = i;
}

void MinPriorityHeap::SiftUp(int64_t i) {
  const Entry e = heap_[i];
  while (i > 0) {
    const int64_t parent = (i - 1) / 2;
    if (!(e < heap_[parent])) break;
    Place(i, heap_[parent]);
    i = parent;
  }
  Place(i, e);
}

void MinPriorityHeap::SiftDown(int64_t i) {
  const Entry e = heap_[i];
  const int64_t n = size();
  for (;;) {
    int64_t child = 2 * i + 1;
    if (child >= n) break;
    if (child + 1 < n && heap_[child + 1] < heap_[child]) ++child;
    if (!(heap_[child] < e)) break;
    Place(i, heap_[child]);
    i = child;
  }
  Place(i, e);
}

void MinPriorityHeap::Restore(int64_t i) {
  if (i > 0 && heap_[i] < heap_[(i - 1) / 2]) {
    SiftUp(i);
  } else {
    SiftDown(i);
  }
}

void MinPriorityHeap::Insert(const Item& item) {
  heap_.push_back({item.priority, item.key, item.slot});
  position_[item.slot] = size() - 1;
  SiftUp(size() - 1);
}

void MinPriorityHeap::Delete(const Item& item) {
  const int64_t i = position_[item.slot];
  const Entry last = heap_.back();
  heap_.pop_back();
  position_[item.slot] = -1;
  if (i == size()) return;  // it was the last entry
  Place(i, last);
  Restore(i);
}

void MinPriorityHeap::UpdatePriorities(const Item* before, const double* priorities, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t at = position_[before[i].slot];
    heap_[at].priority = priorities[i];
    Restore(at);
  }
}

}  // namespace gearjax
