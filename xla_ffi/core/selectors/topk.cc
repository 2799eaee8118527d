// TopK(k) (see topk.h).
#include "core/selectors/topk.h"

namespace gearjax {

void TopKSelector::Insert(const Item& item) {
  ranked_.insert({{item.priority, item.key}, item.slot});
}

void TopKSelector::Delete(const Item& item) { ranked_.erase({item.priority, item.key}); }

void TopKSelector::UpdatePriorities(const Item* before, const double* priorities, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    ranked_.erase({before[i].priority, before[i].key});
    ranked_.insert({{priorities[i], before[i].key}, before[i].slot});
  }
}

}  // namespace gearjax
