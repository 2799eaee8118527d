// The copy that brings sum trees' device mirrors up to date (tree_mirror.h),
// written once for nvcc and the host compiler: each listed node (or every
// node) is read from the host tree, through its GPU-mapped address, and
// written into the mirror in GPU memory. The CUDA handlers enqueue it ahead
// of the kernel that reads the mirrors (cuda/mirror.cu); the CPU emulator
// runs the same code (EmulateMirrorCopies).
//
// The host tree is read when the copy runs, not when it was enqueued: a node
// the host writes meanwhile is copied with either its old or its new value
// (an aligned double is read whole), and since every host write is logged
// again (TreeMirror::Wrote), the next copy brings it up to date. A node the
// GPU update kernel writes is never in a log: the host keeps out of the
// Prioritized trees while an update may run (Table::OwnPrioritiesLocked),
// and the update kernel writes both copies.
#pragma once

#include <cstdint>

#include "core/common.h"
#include "core/limits.h"

namespace gearjax {

// One tree's copy: nodes[0 .. count) of `from` into `to`, or nodes 0 ..
// count - 1 when `nodes` is null (the whole tree). All at device addresses.
struct MirrorCopy {
  const double* from;    // the host tree, GPU-mapped
  double* to;            // the mirror
  const int64_t* nodes;  // pinned, GPU-mapped; null: every node below count
  int64_t count;
};

// The copies one launch makes: at most every tree a table draws on the GPU
// (its Prioritized trees and its Timestep tree).
inline constexpr int kMaxMirrorCopies = kMaxPriorityTrees + 1;

struct MirrorCopies {
  int32_t n = 0;
  MirrorCopy copy[kMaxMirrorCopies];
};

GEARJAX_HD int64_t MirrorCopyNodes(const MirrorCopies& c) {
  int64_t total = 0;
  for (int32_t k = 0; k < c.n; ++k) total += c.copy[k].count;
  return total;
}

// Work item i of the launch (0 <= i < MirrorCopyNodes(c)): one node of one
// tree, the trees' items one after another.
GEARJAX_HD void CopyMirrorNode(const MirrorCopies& c, int64_t i) {
  int32_t k = 0;
  while (k + 1 < c.n && i >= c.copy[k].count) i -= c.copy[k++].count;
  const MirrorCopy& m = c.copy[k];
  const int64_t node = m.nodes != nullptr ? m.nodes[i] : i;
  m.to[node] = m.from[node];
}

// The launch on the CPU, item by item (addresses already host ones).
inline void EmulateMirrorCopies(const MirrorCopies& c) {
  const int64_t total = MirrorCopyNodes(c);
  for (int64_t i = 0; i < total; ++i) CopyMirrorNode(c, i);
}

}  // namespace gearjax
