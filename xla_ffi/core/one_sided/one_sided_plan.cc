// One-sided sampling plans and their registry (see one_sided_plan.h).
#include "core/one_sided/one_sided_plan.h"

#include <cstring>
#include <string>
#include <unordered_map>

#include "core/common.h"
#include "core/nixl/one_sided_nixl.h"

namespace gearjax::one_sided {
namespace {

struct Registry {
  std::mutex mu;
  int64_t next = 1;
  std::unordered_map<int64_t, std::shared_ptr<Plan>> plans;
};

Registry& GetRegistry() {
  static Registry* registry = new Registry();  // never destroyed: handlers may outlive statics
  return *registry;
}

}  // namespace

Plan::Plan(nixl::Agent* agent, std::vector<ShardLayout> shards, Request request, double timeout,
           bool skip_dead)
    : agent_(agent), shards_(std::move(shards)), request_(std::move(request)),
      timeout_(timeout), skip_dead_(skip_dead) {
  if (shards_.empty() || request_.numbers.size() != shards_.size()) {
    throw InvalidArgument("a one-sided plan needs one number per shard, and a shard");
  }
  if (!(timeout_ > 0.0)) throw InvalidArgument("a one-sided plan needs a positive timeout");
  if (agent_ != nullptr && request_.columns.size() > kMaxColumns) {
    throw InvalidArgument("a compiled one-sided sample takes at most " +
                          std::to_string(kMaxColumns) + " columns");
  }
  width_ = request_.window > 0 ? request_.window : shards_[0].max_length;
}

Counts Plan::Sample(const uint32_t seed[2], const Outputs& out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) throw Closed("this sharded table's one-sided sampling is closed");
  request_.seed[0] = seed[0];  // under mu_: one sample of this plan at a time
  request_.seed[1] = seed[1];
  for (;;) {
    try {
      if (agent_ == nullptr) {
        CopyReader reader;
        return one_sided::Sample(reader, shards_, request_, out);
      }
      // Remote reads must land in registered memory: the agent's staging,
      // one buffer per column, copied to `out` after.
      std::lock_guard<std::mutex> sampling(agent_->sampling());
      Outputs into = out;
      for (size_t c = 0; c < request_.columns.size(); ++c) {
        into.columns[c] = agent_->Staging(kFirstColumnStaging + static_cast<int>(c),
                                          ColumnBytes(c));
      }
      AgentReader reader(*agent_, timeout_);
      const Counts counts = one_sided::Sample(reader, shards_, request_, into);
      for (size_t c = 0; c < request_.columns.size(); ++c) {
        std::memcpy(out.columns[c], into.columns[c], ColumnBytes(c));
      }
      return counts;
    } catch (const ShardUnavailable& e) {
      const int number = request_.numbers[e.shard];
      if (!skip_dead_ || shards_.size() == 1) {
        throw std::runtime_error("shard " + std::to_string(number) + " is unavailable: " +
                                 e.what());
      }
      lost_.push_back(number);
      shards_.erase(shards_.begin() + e.shard);
      request_.numbers.erase(request_.numbers.begin() + e.shard);
    }
  }
}

size_t Plan::ColumnBytes(size_t c) const {
  return static_cast<size_t>(request_.batch * width_ * request_.columns[c].step_bytes);
}

void Plan::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
}

std::vector<int> Plan::lost() {
  std::lock_guard<std::mutex> lock(mu_);
  return lost_;
}

int64_t RegisterPlan(std::shared_ptr<Plan> plan) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  const int64_t handle = r.next++;
  r.plans.emplace(handle, std::move(plan));
  return handle;
}

std::shared_ptr<Plan> LookUpPlan(int64_t handle) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.plans.find(handle);
  if (it == r.plans.end()) {
    throw InvalidArgument("no one-sided sampling plan " + std::to_string(handle) +
                          " (its sharded table was closed)");
  }
  return it->second;
}

std::vector<int> ClosePlan(int64_t handle) {
  std::shared_ptr<Plan> plan;
  {
    Registry& r = GetRegistry();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.plans.find(handle);
    if (it == r.plans.end()) return {};
    plan = std::move(it->second);
    r.plans.erase(it);
  }
  plan->Close();
  return plan->lost();
}

}  // namespace gearjax::one_sided
