// A sum tree's copy in GPU memory, for tables whose windows live there
// (placement "device"), and the host's writes to the tree not yet copied.
//
// Why: the host tree lives in GPU-mapped pinned memory, which a GPU draw
// reads across PCIe once per level (8 levels at 10^7 leaves: a round trip
// each), and the GPU priority update once per level too. The mirror puts
// those reads in GPU memory. The host tree stays complete and authoritative
// (host draws, saves, one-sided readers and the next copy read it); the
// mirror is brought up to date by a copy the CUDA handler enqueues ahead of
// each kernel that reads it (mirror_block.h), which reads the nodes the host
// wrote since the last copy (this log) or, on the first copy and when the
// log has grown past its limit, every node.
//
// Invariant: once every copy enqueued so far has run, and no GPU update is in
// flight, the mirror equals the host tree. Host writes are logged under the
// table's lock (SumTree::Set, SetMany); the GPU update kernel writes both
// copies. Not thread-safe: the table's lock guards it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/gpu/mirror_block.h"
#include "core/memory.h"

namespace gearjax {

class TreeMirror {
 public:
  // `nodes` doubles of GPU memory from `memory`; throws std::bad_alloc if
  // they cannot be had. Every node starts out to be copied.
  TreeMirror(size_t nodes, const DeviceMemory* memory);
  ~TreeMirror();
  TreeMirror(const TreeMirror&) = delete;
  TreeMirror& operator=(const TreeMirror&) = delete;

  double* device() const { return device_; }
  size_t nodes() const { return nodes_; }

  // The host wrote `node` (logged once until the next Take).
  void Wrote(int64_t node) {
    if (all_) return;
    uint64_t& word = logged_[static_cast<size_t>(node) / 64];
    const uint64_t bit = uint64_t{1} << (static_cast<uint64_t>(node) % 64);
    if ((word & bit) != 0) return;
    word |= bit;
    log_.push_back(node);
    if (log_.size() > limit_) WroteAll();
  }
  // Every node is to be copied (the log is dropped).
  void WroteAll();

  // Nodes a Take would list: 0 when nothing waits, -1 when every node does.
  int64_t logged() const { return all_ ? -1 : static_cast<int64_t>(log_.size()); }

  // The copy of everything waiting, which is forgotten: the logged nodes,
  // written into `list` (host address, room for logged() entries) and read
  // by the copy at `list_device`; or every node when logged() is -1 (the
  // list is not used). `from`: the host tree's GPU-mapped address.
  MirrorCopy Take(const double* from, int64_t* list, const int64_t* list_device);

  // The log's limit: past it a copy of every node is cheaper to describe
  // than the list (and needs no staging memory).
  size_t limit() const { return limit_; }

 private:
  double* device_ = nullptr;
  const DeviceMemory* memory_;
  size_t nodes_;
  size_t limit_;
  bool all_ = true;
  std::vector<int64_t> log_;
  std::vector<uint64_t> logged_;  // one bit per node, set while in log_
};

}  // namespace gearjax
