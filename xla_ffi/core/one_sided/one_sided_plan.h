// One-sided sampling plans for compiled programs: what a native one-sided
// sample (one_sided.h) needs besides its seed (the agent, the shards'
// layouts for one strategy, the batch's shape), registered under a handle that
// the FFI handler (ffi_one_sided.cc) takes as an attribute, so a jitted
// program samples other processes' shards with no Python in the loop.
//
// A plan outlives nothing it points to: the Python layer closes a transport's
// plans (Close waits for a sample in flight) before it closes the agent.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/nixl/nixl_agent.h"
#include "core/one_sided/one_sided.h"
#include "core/thread_annotations.h"

namespace gearjax::one_sided {

// Where a compiled sample's results go: the small fields as in Outputs, the
// columns in buffers the sampler need not have registered (the plan stages
// remote reads in the agent's registered memory and copies them there).
class Plan {
 public:
  // `agent` nullptr: every shard is this process's (copied). skip_dead: a
  // shard whose read fails is left out of this and later samples (recorded in
  // lost()) instead of failing the sample.
  Plan(nixl::Agent* agent, std::vector<ShardLayout> shards, Request request, double timeout,
       bool skip_dead);

  // One sample with `seed` (two words) into `out`; throws Closed after
  // Close, std::runtime_error naming an unavailable shard (or the last one).
  Counts Sample(const uint32_t seed[2], const Outputs& out);
  // Waits for a sample in flight; later ones throw Closed. Idempotent.
  void Close();
  std::vector<int> lost();  // numbers of the shards left out
  // The batch's shape, fixed when the plan is made (read without the lock).
  int64_t batch() const { return batch_; }
  int64_t width() const { return width_; }
  const std::vector<Column>& columns() const { return columns_; }

  // Columns of a plan with an agent: each stages its reads in one of the
  // agent's buffers, after the sampler's own three (nixl_agent.h: 8 in all).
  static constexpr int kFirstColumnStaging = 3;
  static constexpr size_t kMaxColumns = 5;

 private:
  size_t ColumnBytes(size_t c) const;
  static int64_t WidthOf(const Request& request, const std::vector<ShardLayout>& shards);

  const int64_t batch_;
  const std::vector<Column> columns_;
  const int64_t width_;
  nixl::Agent* const agent_;
  const double timeout_;
  const bool skip_dead_;
  // One sample of this plan at a time: it sets the request's seed, and
  // drops the shards it loses.
  Mutex mu_;
  std::vector<ShardLayout> shards_ GEARJAX_GUARDED_BY(mu_);
  Request request_ GEARJAX_GUARDED_BY(mu_);
  bool closed_ GEARJAX_GUARDED_BY(mu_) = false;
  std::vector<int> lost_ GEARJAX_GUARDED_BY(mu_);
};

int64_t RegisterPlan(std::shared_ptr<Plan> plan);  // a new handle (>= 1)
// The plan, or InvalidArgument naming the handle (never registered, or closed).
std::shared_ptr<Plan> LookUpPlan(int64_t handle);
// Closes and forgets it; returns the shards it lost. Unknown handles: nothing.
std::vector<int> ClosePlan(int64_t handle);

}  // namespace gearjax::one_sided
