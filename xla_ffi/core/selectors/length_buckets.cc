// See length_buckets.h.
#include "core/selectors/length_buckets.h"

#include <cstddef>

namespace gearjax {

LengthBuckets::LengthBuckets(int64_t capacity, int64_t max_length)
    : heads_(static_cast<size_t>(max_length + 1), kNone),
      next_(static_cast<size_t>(capacity), kNone),
      prev_(static_cast<size_t>(capacity), kNone) {}

void LengthBuckets::Insert(const Item& item) {
  const size_t length = static_cast<size_t>(item.length);
  const int32_t slot = static_cast<int32_t>(item.slot);
  const int32_t head = heads_[length];
  next_[static_cast<size_t>(slot)] = head;
  prev_[static_cast<size_t>(slot)] = kNone;
  if (head != kNone) prev_[static_cast<size_t>(head)] = slot;
  heads_[length] = slot;
}

void LengthBuckets::Delete(const Item& item) {
  const size_t slot = static_cast<size_t>(item.slot);
  const int32_t next = next_[slot], prev = prev_[slot];
  if (prev != kNone) {
    next_[static_cast<size_t>(prev)] = next;
  } else {
    heads_[static_cast<size_t>(item.length)] = next;
  }
  if (next != kNone) prev_[static_cast<size_t>(next)] = prev;
  next_[slot] = prev_[slot] = kNone;
}

}  // namespace gearjax
