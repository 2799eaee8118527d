// The selector interface. A selector is a structure that chooses live items,
// for sampling (Uniform, Timestep, Prioritized, TopK, Recent) or for removal
// (FIFO, LIFO, min-priority), in Reverb's vocabulary. The table tells every
// selector it keeps about each item that becomes live, leaves, or changes
// priority, always under its lock; each selector answers its own typed
// queries (see uniform.h, prioritized.h, fifo.h, heap.h).
//
// A table creates the selectors a strategy needs when a sample with that
// strategy is first admitted, and keeps them up to date from then on, so a
// table pays only for the selection it uses.
#pragma once

#include <cstdint>

namespace gearjax {

// What a selector may key on: a live item's slot, key, length and priority.
struct Item {
  int64_t slot;
  int64_t key;
  int64_t length;
  double priority;
};

// One drawn row: the slot, and the probability with which it was drawn.
struct Selection {
  int64_t slot;
  double probability;
};

class Selector {
 public:
  virtual ~Selector() = default;
  virtual void Insert(const Item& item) = 0;
  virtual void Delete(const Item& item) = 0;
  // Whether UpdatePriorities does anything (the table skips the others).
  virtual bool UsesPriority() const { return false; }
  // Live items change priority: before[i] holds item i with its old priority,
  // priorities[i] is its new one. A slot may appear more than once; its last
  // entry wins, and each entry's `before` holds the priority the previous
  // entry set.
  virtual void UpdatePriorities(const Item* before, const double* priorities, int64_t n) {
    (void)before;
    (void)priorities;
    (void)n;
  }
};

// A uniform index in [0, n) from u in [0, 1): the rank TopK and Recent draw.
inline int64_t UniformIndex(double u, int64_t n) {
  const int64_t i = static_cast<int64_t>(u * static_cast<double>(n));
  return i < n ? i : n - 1;
}

}  // namespace gearjax
