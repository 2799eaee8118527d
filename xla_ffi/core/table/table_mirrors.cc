// Table's sum-tree mirrors in GPU memory (see tree_mirror.h and
// Table::BeginGpuSample): which tables have them and which trees they copy;
// the copies and the pinned lists they read (which also hold a host-selected
// GPU sample's draws: StagingFor) are GpuStaging's (gpu/gpu_staging.h).
#include <algorithm>
#include <new>
#include <utility>

#include "core/gpu/gpu_staging.h"
#include "core/gpu/tree_mirror.h"
#include "core/selectors/prioritized.h"
#include "core/selectors/timestep.h"
#include "core/table/table.h"

namespace gearjax {

bool Table::MirrorsTreesLocked() const {
  // Mirrors are made on the calling thread's GPU, which is the arena's: the
  // CUDA handlers refuse a device table on any other (CheckDevice).
  return spec_.on_device && device_memory_ != nullptr;
}

GpuStaging& Table::GpuStagingLocked() {
  if (gpu_staging_ == nullptr) {
    gpu_staging_ = std::make_unique<GpuStaging>(mapped_by_, device_memory_);
  }
  return *gpu_staging_;
}

std::pair<void*, const void*> Table::StagingFor(uint64_t ticket, size_t bytes) {
  RetiredStaging retired;  // freed after the lock is released (declared first)
  MutexLock lock(CheckedMutex());
  CheckOpenLocked();
  MappedArray<int64_t>* list = nullptr;
  try {
    list = GpuStagingLocked().ListFor(static_cast<int64_t>((bytes + 7) / 8), ticket, tickets_,
                                      &retired);
  } catch (const std::bad_alloc&) {
    list = nullptr;
  }
  if (list == nullptr || list->device_data() == nullptr) return {nullptr, nullptr};
  return {list->data(), list->device_data()};
}

std::vector<const SumTree*> Table::DrawTreesLocked() const {
  std::vector<const SumTree*> trees;
  for (const TimestepSelector* selector : selectors_.Of<TimestepSelector>(Strategy::kTimestep)) {
    trees.push_back(&selector->tree());
  }
  for (const PrioritizedSelector* selector :
       selectors_.Of<PrioritizedSelector>(Strategy::kPrioritized)) {
    trees.push_back(&selector->tree());
  }
  return trees;
}

void Table::MirrorCopiesLost() {
  MutexLock lock(CheckedMutex());
  for (const SumTree* tree : DrawTreesLocked()) {
    if (TreeMirror* mirror = tree->mirror()) mirror->WroteAll();
  }
}

std::vector<Table::MirroredTree> Table::MirroredTrees() const {
  MutexLock lock(CheckedMutex());
  std::vector<MirroredTree> out;
  for (const SumTree* tree : DrawTreesLocked()) {
    const TreeMirror* mirror = tree->mirror();
    if (mirror == nullptr) continue;
    MirroredTree& t = out.emplace_back();
    t.host.assign(tree->view().nodes, tree->view().nodes + tree->node_count());
    t.mirror.resize(tree->node_count());
    device_memory_->copy_out(t.mirror.data(), mirror->device(), t.mirror.size() * sizeof(double));
  }
  return out;
}

}  // namespace gearjax
