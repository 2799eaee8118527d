// The native one-sided sampler's reader over a NIXL agent (one_sided.h,
// nixl_agent.h): other processes' shards through one batched NIXL read,
// this process's own by memcpy; staging in the agent's registered buffers;
// fixed reads (the snapshot) kept by the agent and posted again.
#pragma once

#include "core/nixl/nixl_agent.h"
#include "core/one_sided/one_sided.h"

namespace gearjax::one_sided {

class AgentReader : public Reader {
 public:
  AgentReader(nixl::Agent& agent, double timeout_seconds)
      : agent_(agent), timeout_(timeout_seconds) {}
  nixl::ReadResult Read(const std::vector<ShardLayout>& shards,
                        const std::vector<ShardSpans>& spans, bool fixed) override;
  // Its callers hold agent.sampling() for the whole sample
  // (one_sided_plan.cc, python/one_sided_module.cc); the analysis cannot
  // follow that through the Reader interface.
  uint8_t* Staging(int use, size_t bytes) override GEARJAX_NO_THREAD_SAFETY_ANALYSIS {
    return agent_.Staging(use, bytes);
  }

 private:
  nixl::Agent& agent_;
  double timeout_;
};

}  // namespace gearjax::one_sided
