// TableGpu's samples (see table_gpu.h): the device checks, the completion
// ring, a GPU sample's begin, and the sum-tree mirrors in GPU memory
// (tree_mirror.h): which tables have them and which trees they copy. The
// copies and the pinned lists they read (which also hold a host-selected GPU
// sample's draws: StagingFor) are GpuStaging's (gpu/gpu_staging.h).
#include <algorithm>
#include <new>
#include <string>
#include <utility>

#include "core/gpu/gpu_staging.h"
#include "core/gpu/tree_mirror.h"
#include "core/selectors/prioritized.h"
#include "core/selectors/timestep.h"
#include "core/table/table.h"
#include "core/table/table_gpu.h"

namespace gearjax {

void TableGpu::CheckDevice(int device) const {
  const int home = table_.device_ordinal_;
  if (table_.device_memory_ == nullptr || device == home) return;
  throw InvalidArgument("this table lives in the memory of GPU " + std::to_string(home) +
                        " (placement 'device'), and this program runs on GPU " +
                        std::to_string(device) + "; give each GPU its own table, or use "
                        "placement 'host', which every GPU reads");
}

void TableGpu::CheckReachable(const MappedAllocator* mapped, const DeviceMemory* device) const {
  const bool arena = table_.device_memory_ != nullptr
                         ? table_.device_memory_ == device
                         : mapped != nullptr && table_.mapped_by_ == mapped;
  const bool state = mapped != nullptr && table_.mapped_by_ == mapped;
  if (arena && state) return;
  throw InvalidArgument(
      "this table's memory is not reachable from the GPU: it was made without a GPU mapping "
      "(no GPU was visible when the table was made, pinning its memory failed, or a test "
      "emulated the mapping), so no GPU kernel may read it; sample it from a CPU program "
      "(jax.default_device(jax.devices('cpu')[0])), or make the table on a process that sees "
      "the GPU");
}

void TableGpu::UseCompletions(const DeviceMemory* memory, int device) {
  const GpuCompletions* made = table_.completions_.load(std::memory_order_acquire);
  if (made != nullptr && made->HasDevice(device)) return;
  MutexLock lock(table_.CheckedMutex());
  table_.CheckOpenLocked();
  if (table_.completions_owner_ == nullptr) {
    auto completions = std::make_unique<GpuCompletions>(table_.mapped_by_);
    completions->AddDevice(device, memory);
    table_.completions_owner_ = std::move(completions);
    table_.tickets_.SetCompletions(table_.completions_owner_.get());
    table_.completions_.store(table_.completions_owner_.get(), std::memory_order_release);
  } else {
    table_.completions_owner_->AddDevice(device, memory);
  }
}

int64_t TableGpu::TicketsOnDevice() const {
  MutexLock lock(table_.CheckedMutex());
  return table_.tickets_.on_device();
}

CompletionView TableGpu::CompletionFor(uint64_t ticket, int device) const {
  const GpuCompletions* completions = table_.completions_.load(std::memory_order_acquire);
  if (completions == nullptr) throw InvalidArgument("this table has no GPU completion ring");
  return completions->View(ticket, device);
}

uint64_t TableGpu::BeginSample(const SampleRequest& r, GpuSelection* selection,
                               MirrorCopies* copies, const void* stream) {
  if (copies != nullptr) copies->n = 0;
  table_.CheckRequest(r);
  if (table_.SelectsOnHost(r)) {
    throw InvalidArgument("TopK, Recent and constrained samples are not selected on the GPU");
  }
  RetiredStaging retired;  // freed after the lock is released (declared first)
  MutexLock lock(table_.CheckedMutex());
  table_.CheckOpenLocked();
  if (table_.slots_->device_info() == nullptr) {
    throw InvalidArgument("this table's selection state is not GPU-mapped");
  }
  const SamplingSelector* chosen = nullptr;
  // The ticket is taken in the hold of the lock the selector was chosen in,
  // as Table::Select takes it.
  table_.DrawForTicketLocked(lock, r, [&] {
    table_.mu_.AssertHeld();
    // Leaves deferred while an update ran go in now if none may run any more
    // (so this sample, and the mirror copy below, see them).
    if (table_.selectors_.Has(Strategy::kPrioritized)) table_.SettledPrioritiesLocked();
    chosen = &table_.SamplingSelectorLocked(r);  // may wait for a GPU update to make it
  });
  const SamplingSelector& selector = *chosen;
  GpuSelection s{};
  s.info = table_.slots_->device_info();
  s.capacity = table_.spec_.capacity;
  s.table_size = table_.live_;
  s.cut = r.cut;
  if (!selector.DescribeForGpu(&s)) {
    throw InvalidArgument("this strategy is not selected on the GPU");
  }
  table_.counters_.samples += static_cast<double>(r.batch);
  table_.changed_.notify_all();  // inserters may be waiting on the limiter
  const uint64_t ticket = table_.tickets_.Take();
  // The tree's mirror serves unless the host tree may still be written in
  // stream order (a staged update's host function) or by another stream's
  // GPU update, which the mirror would miss; or unless another stream's copy
  // into the mirrors may still run (this sample's kernel, on its own stream,
  // is not ordered after it: on first use it would read a mirror not yet
  // written). The mapped host tree serves those samples.
  const bool priorities_settled =
      !selector.UsesPriority() ||
      (table_.staged_updates_.load(std::memory_order_acquire) == 0 &&
       !OtherStreamUpdateInFlightLocked(stream));
  // A step tree (capacity x max_length leaves) is read where it is, in mapped
  // host memory: a mirror would copy all of it into GPU memory.
  if (copies != nullptr && !s.uniform && s.leaves_per_slot == 1 && priorities_settled &&
      !OtherStreamMirrorCopyLocked(stream) && MirrorsTreesLocked()) {
    const SumTree* tree = selector.DrawTree();
    double* mirror = nullptr;
    StagingLocked().CopyMirrors(&tree, 1, ticket, stream, table_.tickets_, copies, &mirror,
                                &retired);
    if (mirror != nullptr) s.tree.nodes = mirror;
  }
  *selection = s;
  return ticket;
}

bool TableGpu::MirrorsTreesLocked() const {
  // Mirrors are made on the calling thread's GPU, which is the arena's: the
  // CUDA handlers refuse a device table on any other (CheckDevice).
  return table_.spec_.on_device && table_.device_memory_ != nullptr;
}

GpuStaging& TableGpu::StagingLocked() {
  if (table_.gpu_staging_ == nullptr) {
    table_.gpu_staging_ =
        std::make_unique<GpuStaging>(table_.mapped_by_, table_.device_memory_);
  }
  return *table_.gpu_staging_;
}

std::pair<void*, const void*> TableGpu::StagingFor(uint64_t ticket, size_t bytes) {
  RetiredStaging retired;  // freed after the lock is released (declared first)
  MutexLock lock(table_.CheckedMutex());
  table_.CheckOpenLocked();
  MappedArray<int64_t>* list = nullptr;
  try {
    list = StagingLocked().ListFor(static_cast<int64_t>((bytes + 7) / 8), ticket, table_.tickets_,
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

void TableGpu::MirrorCopiesLost() {
  MutexLock lock(table_.CheckedMutex());
  for (const SumTree* tree : table_.DrawTreesLocked()) {
    if (TreeMirror* mirror = tree->mirror()) mirror->WroteAll();
  }
}

std::vector<TableGpu::MirroredTree> TableGpu::MirroredTrees() const {
  MutexLock lock(table_.CheckedMutex());
  std::vector<MirroredTree> out;
  for (const SumTree* tree : table_.DrawTreesLocked()) {
    const TreeMirror* mirror = tree->mirror();
    if (mirror == nullptr) continue;
    MirroredTree& m = out.emplace_back();
    m.host.assign(tree->view().nodes, tree->view().nodes + tree->node_count());
    m.mirror.resize(tree->node_count());
    table_.device_memory_->copy_out(m.mirror.data(), mirror->device(),
                                    m.mirror.size() * sizeof(double));
  }
  return out;
}

}  // namespace gearjax
