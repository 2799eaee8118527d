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
  Mutex mu;
  int64_t next GEARJAX_GUARDED_BY(mu) = 1;
  std::unordered_map<int64_t, std::shared_ptr<Plan>> plans GEARJAX_GUARDED_BY(mu);
};

Registry& GetRegistry() {
  static Registry* registry = new Registry();  // never destroyed: handlers may outlive statics
  return *registry;
}

}  // namespace

Plan::Plan(nixl::Agent* agent, std::vector<ShardLayout> shards, Request request, double timeout,
           bool skip_dead)
    : batch_(request.batch),
      columns_(request.columns),
      width_(WidthOf(request, shards)),
      agent_(agent),
      timeout_(timeout),
      skip_dead_(skip_dead),
      shards_(std::move(shards)),
      request_(std::move(request)) {
  if (shards_.empty() || request_.numbers.size() != shards_.size()) {
    throw InvalidArgument("a one-sided plan needs one number per shard, and a shard");
  }
  if (!(timeout_ > 0.0)) throw InvalidArgument("a one-sided plan needs a positive timeout");
  if (agent_ != nullptr && columns_.size() > kMaxColumns) {
    throw InvalidArgument("a compiled one-sided sample takes at most " +
                          std::to_string(kMaxColumns) + " columns");
  }
}

int64_t Plan::WidthOf(const Request& request, const std::vector<ShardLayout>& shards) {
  if (request.window > 0) return request.window;
  return shards.empty() ? 0 : shards[0].max_length;  // no shard: refused by the constructor
}

Counts Plan::Sample(const uint32_t seed[2], const Outputs& out) {
  MutexLock lock(mu_);
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
      MutexLock sampling(agent_->sampling());
      Outputs into = out;
      for (size_t c = 0; c < columns_.size(); ++c) {
        into.columns[c] = agent_->Staging(kFirstColumnStaging + static_cast<int>(c),
                                          ColumnBytes(c));
      }
      AgentReader reader(*agent_, timeout_);
      const Counts counts = one_sided::Sample(reader, shards_, request_, into);
      for (size_t c = 0; c < columns_.size(); ++c) {
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
  return static_cast<size_t>(batch_ * width_ * columns_[c].step_bytes);
}

void Plan::Close() {
  MutexLock lock(mu_);
  closed_ = true;
}

std::vector<int> Plan::lost() {
  MutexLock lock(mu_);
  return lost_;
}

int64_t RegisterPlan(std::shared_ptr<Plan> plan) {
  Registry& r = GetRegistry();
  MutexLock lock(r.mu);
  const int64_t handle = r.next++;
  r.plans.emplace(handle, std::move(plan));
  return handle;
}

std::shared_ptr<Plan> LookUpPlan(int64_t handle) {
  Registry& r = GetRegistry();
  MutexLock lock(r.mu);
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
    MutexLock lock(r.mu);
    auto it = r.plans.find(handle);
    if (it == r.plans.end()) return {};
    plan = std::move(it->second);
    r.plans.erase(it);
  }
  plan->Close();
  return plan->lost();
}

}  // namespace gearjax::one_sided
