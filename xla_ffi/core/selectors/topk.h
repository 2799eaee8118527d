// TopK(k): draws uniformly over the k highest priorities, the newer (larger
// key) first among ties: a RankingSelector ranked by (priority, key).
#pragma once

#include <cstdint>
#include <utility>

#include "core/selectors/ranking.h"

namespace gearjax {

class TopKSelector final : public RankingSelector<std::pair<double, int64_t>> {
 public:
  void Insert(const Item& item) override;
  void Delete(const Item& item) override;
  bool UsesPriority() const override { return true; }
  void UpdatePriorities(const Item* before, const double* priorities, int64_t n) override;
};

}  // namespace gearjax
