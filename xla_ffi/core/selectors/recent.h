// Recent(n): draws uniformly over the n newest items (the n largest keys): a
// RankingSelector ranked by key.
#pragma once

#include <cstdint>

#include "core/selectors/ranking.h"

namespace gearjax {

class RecentSelector final : public RankingSelector<int64_t> {
 public:
  void Insert(const Item& item) override { ranked_.insert({item.key, item.slot}); }
  void Delete(const Item& item) override { ranked_.erase(item.key); }
};

}  // namespace gearjax
