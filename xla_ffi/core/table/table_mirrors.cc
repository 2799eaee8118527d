// Table's sum-tree mirrors in GPU memory (see tree_mirror.h and
// Table::BeginGpuSample): which tables have them, what a GPU call copies into
// them first, and the pinned lists those copies read (which also hold a
// host-selected GPU sample's draws: StagingFor).
#include <algorithm>
#include <new>
#include <utility>

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

MappedArray<int64_t>* Table::MirrorStagingLocked(int64_t entries, uint64_t ticket,
                                                 RetiredStaging* retired) {
  const size_t needed = static_cast<size_t>(entries);
  std::shared_ptr<MirrorStaging>* reusable = nullptr;  // ended, but too small
  for (auto& staging : mirror_staging_) {
    if (tickets_.InFlight(staging->ticket)) continue;
    if (staging->list.size() >= needed) {
      staging->ticket = ticket;
      return &staging->list;
    }
    reusable = &staging;
  }
  // None large enough: a new list, twice the size asked (a log grows), in
  // place of a free one that is too small, or beside the others (as many as
  // copies in flight at once).
  auto made = std::make_shared<MirrorStaging>(
      MirrorStaging{ticket, MappedArray<int64_t>(std::max<size_t>(needed * 2, 1024), mapped_by_)});
  if (made->list.device_data() == nullptr) return nullptr;
  if (reusable == nullptr) reusable = &mirror_staging_.emplace_back();
  if (*reusable != nullptr) retired->push_back(std::move(*reusable));  // freed unlocked
  *reusable = std::move(made);
  return &(*reusable)->list;
}

std::pair<void*, const void*> Table::StagingFor(uint64_t ticket, size_t bytes) {
  RetiredStaging retired;  // freed after the lock is released (declared first)
  MutexLock lock(CheckedMutex());
  CheckOpenLocked();
  MappedArray<int64_t>* list = nullptr;
  try {
    list = MirrorStagingLocked(static_cast<int64_t>((bytes + 7) / 8), ticket, &retired);
  } catch (const std::bad_alloc&) {
    list = nullptr;
  }
  if (list == nullptr || list->device_data() == nullptr) return {nullptr, nullptr};
  return {list->data(), list->device_data()};
}

void Table::CopyMirrorsLocked(const SumTree* const* trees, int n, uint64_t ticket,
                              const void* stream, MirrorCopies* copies, double** mirrors,
                              RetiredStaging* retired) {
  TreeMirror* mirror[kMaxMirrorCopies] = {};
  int64_t logged = 0;
  for (int i = 0; i < n; ++i) {
    mirrors[i] = nullptr;
    if (copies->n + i >= kMaxMirrorCopies) continue;
    mirror[i] = trees[i]->Mirror(device_memory_);
    if (mirror[i] != nullptr) logged += std::max<int64_t>(mirror[i]->logged(), 0);
  }
  MappedArray<int64_t>* list = nullptr;
  if (logged > 0) {
    try {
      list = MirrorStagingLocked(logged, ticket, retired);
    } catch (const std::bad_alloc&) {
      list = nullptr;
    }
  }
  int64_t used = 0;
  for (int i = 0; i < n; ++i) {
    if (mirror[i] == nullptr) continue;
    mirrors[i] = mirror[i]->device();
    const int64_t entries = mirror[i]->logged();
    if (entries == 0) continue;
    if (entries > 0 && list == nullptr) mirror[i]->WroteAll();  // no list: copy every node
    const double* from = trees[i]->device_view().nodes;
    copies->copy[copies->n++] =
        list == nullptr ? mirror[i]->Take(from, nullptr, nullptr)
                        : mirror[i]->Take(from, list->data() + used, list->device_data() + used);
    used += std::max<int64_t>(entries, 0);
  }
  if (copies->n > 0) {
    if (mirror_copy_last_ != 0 && stream != mirror_copy_stream_) mirror_copy_streams_mixed_ = true;
    mirror_copy_last_ = std::max(mirror_copy_last_, ticket);
    mirror_copy_stream_ = stream;
  }
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
