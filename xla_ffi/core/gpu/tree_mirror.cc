// A sum tree's copy in GPU memory and its write log (see tree_mirror.h).
#include "core/gpu/tree_mirror.h"

#include <algorithm>
#include <new>

namespace gearjax {

namespace {
// At most this many logged nodes per copy (8 bytes each in pinned staging
// memory); a tree of fewer nodes is copied whole past an eighth of them.
constexpr size_t kMaxLoggedNodes = size_t{1} << 16;
}  // namespace

TreeMirror::TreeMirror(size_t nodes, const DeviceMemory* memory)
    : memory_(memory),
      nodes_(nodes),
      limit_(std::min(kMaxLoggedNodes, std::max<size_t>(nodes / 8, 1))),
      logged_((nodes + 63) / 64, 0) {
  if (memory_ == nullptr || nodes == 0) throw std::bad_alloc();
  // The log's room, now: Wrote runs inside a tree's update, after its first
  // write, and must not allocate there (an update that could not would be
  // half done).
  log_.reserve(limit_ + 1);
  device_ = static_cast<double*>(memory_->allocate(nodes * sizeof(double)));
  if (device_ == nullptr) throw std::bad_alloc();
}

TreeMirror::~TreeMirror() { ReleaseDevice(memory_, device_); }

void TreeMirror::WroteAll() {
  for (int64_t node : log_) logged_[static_cast<size_t>(node) / 64] = 0;
  log_.clear();
  all_ = true;
}

MirrorCopy TreeMirror::Take(const double* from, int64_t* list, const int64_t* list_device) {
  MirrorCopy copy{from, device_, nullptr, static_cast<int64_t>(nodes_)};
  if (all_) {
    all_ = false;
    return copy;
  }
  std::copy(log_.begin(), log_.end(), list);
  for (int64_t node : log_) logged_[static_cast<size_t>(node) / 64] = 0;
  copy.nodes = list_device;
  copy.count = static_cast<int64_t>(log_.size());
  log_.clear();
  return copy;
}

}  // namespace gearjax
