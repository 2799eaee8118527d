// The sampler's reader over NIXL (see one_sided_nixl.h).
#include "core/nixl/one_sided_nixl.h"

#include <cstring>

namespace gearjax::one_sided {

nixl::ReadResult AgentReader::Read(const std::vector<ShardLayout>& shards,
                                   const std::vector<ShardSpans>& spans, bool fixed) {
  std::vector<nixl::ReadRequest> requests;
  std::vector<int> which;  // requests[i] reads spans[which[i]]
  for (size_t i = 0; i < spans.size(); ++i) {
    const ShardSpans& s = spans[i];
    const ShardLayout& shard = shards[s.shard];
    if (shard.peer.empty()) {  // this process's shard
      for (size_t j = 0; j < s.sizes.size(); ++j) {
        std::memcpy(reinterpret_cast<void*>(s.local[j]),
                    reinterpret_cast<const void*>(s.remote[j]), s.sizes[j]);
      }
      continue;
    }
    requests.push_back({shard.peer, s.remote.data(), s.local.data(), s.sizes.data(),
                        s.sizes.size(), fixed});
    which.push_back(static_cast<int>(i));
  }
  if (requests.empty()) return {};
  nixl::ReadResult result = agent_.Read(requests, timeout_);
  if (result.request >= 0) result.request = which[result.request];
  return result;
}

}  // namespace gearjax::one_sided
