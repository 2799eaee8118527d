// An ordered map with rank queries (find the r-th smallest key, O(log N)):
// libstdc++'s policy-based red-black tree with the order-statistics node
// update. A maintained implementation of exactly the structure TopK and Recent
// need, rather than one of our own.
#pragma once

#include <ext/pb_ds/assoc_container.hpp>
#include <ext/pb_ds/tree_policy.hpp>

#include <cstdint>
#include <functional>

namespace gearjax {

template <typename Key>
using OrderStatistics = __gnu_pbds::tree<Key, int64_t, std::less<Key>, __gnu_pbds::rb_tree_tag,
                                         __gnu_pbds::tree_order_statistics_node_update>;

}  // namespace gearjax
