// A priority update applied by one GPU kernel (one block), with nothing else
// on the stream: what the kernel reads and writes, and its phases, written
// once for nvcc and the host compiler (the CPU emulator runs them thread by
// thread: EmulateGpuUpdate), like sample_block.h.
//
// The kernel does what Table::UpdatePriorities does on the host, with the
// same result bit for bit (where the device's pow agrees with the host's):
//  0. Deferred leaves: slots the host published while an earlier update
//     could run (GpuUpdateLedger's deferred leaves, gpu_updates.h) get their
//     leaf in every Prioritized tree from their record, as the host's insert
//     would have set it, before the update's own leaves (so an entry naming
//     one wins), bad priorities or not.
//  1. Check: every priority decoded (Float32ToDouble) and checked
//     (ValidPriority); every key looked up in the slot records (live, same
//     key: a stale key's slot holds another key or none); live keys entered in
//     a hash table in shared memory keeping each slot's last entry.
//  2. If any priority is bad, nothing changes: the first bad entry goes to the
//     table's report (GpuUpdateReport), the next call on the table raises it
//     (Table::RaiseDeferredError), and the result is -1.
//  3. Leaves: each slot's last entry (later duplicates win) sets its record's
//     priority and its leaf in every Prioritized tree (PriorityWeight).
//  4. Parents, level by level: each changed leaf's (deferred ones too)
//     ancestor at that level is
//     recomputed from its children (SumTreeLineSum), as SumTree::SetMany does.
//     Two threads may write one parent; they write the same value.
//  5. Counts (entries naming a live key, stale keys, the change in positive
//     priorities) added to the report, the result written, the ticket
//     reported through the completion ring (completion_block.h).
// The host keeps out of the records' priorities and the Prioritized trees
// while the kernel may run (Table::OwnPrioritiesLocked), but for inserts:
// they publish new records meanwhile (never the priority of a live one) and
// defer their leaves. A record's key is read only after its state says live
// (GpuUpdateLiveKey), so a stale key never matches the slot's new item.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/common.h"
#include "core/decode.h"
#include "core/gpu/completion_block.h"
#include "core/gpu/live_record.h"
#include "core/limits.h"
#include "core/selectors/priority_weight.h"
#include "core/selectors/sum_tree.h"
#include "core/table/slots.h"

namespace gearjax {

// At most this many keys a GPU update (its shared memory: 20 bytes a key at
// most, within what the GPU allows: GpuUpdateFits); larger updates are
// staged on the host (staged_update.h).
inline constexpr int64_t kMaxGpuUpdateKeys = 4096;

// What kernels add up for the host, in GPU-mapped pinned memory; the host
// only reads it (one per table, made on the first GPU update).
struct GpuUpdateReport {
  unsigned long long updated;   // entries that named a live key (Stats::priority_updates)
  unsigned long long skipped;   // entries naming no live key, negative keys not counted
  unsigned long long positive;  // change in the count of positive priorities (two's complement)
  unsigned long long failed;    // updates refused for a bad priority
  // The first refused update since the host last looked: its first bad entry
  // and value, written by the kernel that then sets `held` (0 -> 1); the
  // host claims them (1 -> 2), reads them and frees the place (0)
  // (GpuUpdateReportCell::TakeFailures, Table::RaiseDeferredError).
  unsigned long long held;
  long long bad_entry;
  double bad_value;
};

// One Prioritized tree, at device addresses: the nodes the kernel reads and
// writes (the tree's mirror in GPU memory on a device table, else the
// GPU-mapped host tree) and, beside a mirror, the host tree, which it also
// writes (never reads).
struct GpuUpdateTree {
  double* nodes;
  double* host_nodes;  // nullptr without a mirror
  double alpha;
};

// Sets node `i` of tree `t` in both its copies.
GEARJAX_HD void GpuUpdateWrite(const GpuUpdateTree& t, int64_t i, double value) {
  t.nodes[i] = value;
  if (t.host_nodes != nullptr) t.host_nodes[i] = value;
}

// What the kernel updates: the table's state at device addresses (filled by
// TableGpu::BeginUpdate) and the call's operands.
struct GpuUpdate {
  SlotInfo* info;       // per-slot records
  int64_t capacity;
  int64_t slot_mask;    // a key's slot bits (KeyLayout)
  int32_t levels;       // every tree has the same shape (one leaf per slot)
  int64_t offsets[kSumTreeMaxLevels];
  int32_t trees;
  GpuUpdateTree tree[kMaxPriorityTrees];
  GpuUpdateReport* report;
  CompletionView completion;
  const int64_t* deferred;  // deferred leaves' slots (pinned, mapped), or null
  int64_t deferred_n;
  // The call's.
  const void* keys;
  KeyFormat key_format;
  const void* priorities;
  PriorityFormat priority_format;
  int64_t n;
  int32_t* updated;  // the result: entries that named a live key, or -1
};

// The kernel's shared memory, carved from one buffer of GpuUpdateSharedBytes.
struct GpuUpdateShared {
  int32_t* slot;      // [n]: the entry's live slot, -1; after Leaves, -1 unless it won
  int32_t* hash_slot; // [hash_size]: -1 = empty
  int32_t* hash_last; // [hash_size]: the slot's last entry
  int64_t hash_size;  // a power of two >= 2n
  long long* first_bad;  // n when none
  unsigned long long* live;
  unsigned long long* skipped;
  long long* positive;
};

GEARJAX_HD int64_t GpuUpdateHashSize(int64_t n) {
  int64_t size = 16;
  while (size < 2 * n) size *= 2;
  return size;
}

GEARJAX_HD size_t GpuUpdateSharedBytes(int64_t n) {
  return 64 + static_cast<size_t>(n) * 4 + static_cast<size_t>(GpuUpdateHashSize(n)) * 8;
}

// No bound on a block's shared memory but the kernel's own (kMaxGpuUpdateKeys):
// the CPU emulator's.
inline constexpr size_t kAnyGpuSharedMemory = ~size_t{0};

// Whether an update of `n` keys runs as one kernel on a GPU that lets a block
// use `shared_limit` bytes of shared memory (the CUDA layer's
// PriorityUpdateSharedLimit: the device's opt-in maximum, which Turing puts
// at 64 KiB, short of the 73,796-81,984 B of 2,049-4,096 keys). Updates that
// do not are staged on the host (TableGpu::BeginUpdate).
inline bool GpuUpdateFits(int64_t n, size_t shared_limit) {
  return n >= 0 && n <= kMaxGpuUpdateKeys && GpuUpdateSharedBytes(n) <= shared_limit;
}

// Carves `memory` (GpuUpdateSharedBytes(n), 8-byte aligned).
GEARJAX_HD GpuUpdateShared CarveGpuUpdateShared(void* memory, int64_t n) {
  GpuUpdateShared s;
  auto* words = static_cast<long long*>(memory);
  s.first_bad = words;
  s.live = reinterpret_cast<unsigned long long*>(words + 1);
  s.skipped = reinterpret_cast<unsigned long long*>(words + 2);
  s.positive = words + 3;
  s.hash_size = GpuUpdateHashSize(n);
  s.hash_slot = reinterpret_cast<int32_t*>(words + 8);
  s.hash_last = s.hash_slot + s.hash_size;
  s.slot = s.hash_last + s.hash_size;
  return s;
}

// Shared-memory atomics: the device's, or plain steps where the emulator runs
// one thread at a time.
namespace update_atomic {
GEARJAX_HD int32_t Cas(int32_t* p, int32_t expected, int32_t desired) {
#ifdef __CUDA_ARCH__
  return atomicCAS(p, expected, desired);
#else
  const int32_t old = *p;
  if (old == expected) *p = desired;
  return old;
#endif
}
GEARJAX_HD void Max(int32_t* p, int32_t v) {
#ifdef __CUDA_ARCH__
  atomicMax(p, v);
#else
  if (v > *p) *p = v;
#endif
}
GEARJAX_HD void Min(long long* p, long long v) {
#ifdef __CUDA_ARCH__
  atomicMin(p, v);
#else
  if (v < *p) *p = v;
#endif
}
GEARJAX_HD void Add(unsigned long long* p, unsigned long long v) {
#ifdef __CUDA_ARCH__
  atomicAdd(p, v);
#else
  *p += v;
#endif
}
}  // namespace update_atomic

// The report, in pinned host memory the host reads meanwhile, is written with
// plain loads and stores, never atomics: a GPU on PCIe cannot do atomics on
// host memory (compute-sanitizer's "Invalid __global__ system-scoped atomic"
// on the H200, 2026-11-30), and none are needed, as it has one writer on the
// GPU at a time: one thread of one kernel (GpuUpdateFinish), and a table's
// update kernels run one after another (one stream at a time, one GPU at a
// time: GpuUpdateLedger, TableGpu::BeginUpdate). The host only reads it, but
// for claiming and freeing `held` around its read of the details (TakeFailures).
namespace update_report {
GEARJAX_HD unsigned long long Load(const unsigned long long* p) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const volatile unsigned long long*>(p);
#else
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#endif
}
GEARJAX_HD void Store(unsigned long long* p, unsigned long long v) {
#ifdef __CUDA_ARCH__
  *reinterpret_cast<volatile unsigned long long*>(p) = v;
#else
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
#endif
}
// Adds `v` to a count only kernels write.
GEARJAX_HD void Add(unsigned long long* p, unsigned long long v) { Store(p, Load(p) + v); }
// The first refused update's details, where the host has taken the last ones
// (`held` 0): the entry and value, then `held` 1 that announces them (a host
// that sees 1 reads them whole). The host writes 0 only after claiming 1
// (as 2), so a 0 read here stays 0 until this kernel's 1.
GEARJAX_HD void HoldDetails(GpuUpdateReport* r, long long entry, double value) {
  if (Load(&r->held) != 0) return;  // the host has yet to take earlier ones
#ifdef __CUDA_ARCH__
  *reinterpret_cast<volatile long long*>(&r->bad_entry) = entry;
  *reinterpret_cast<volatile double*>(&r->bad_value) = value;
  __threadfence_system();
#else
  r->bad_entry = entry;
  r->bad_value = value;
#endif
  Store(&r->held, 1);  // a release store on the host
}
}  // namespace update_report

GEARJAX_HD int64_t GpuUpdateKey(const GpuUpdate& u, int64_t i) {
  switch (u.key_format) {
    case KeyFormat::kInt32: return static_cast<const int32_t*>(u.keys)[i];
    case KeyFormat::kUInt32: return static_cast<const uint32_t*>(u.keys)[i];
    default: return static_cast<const int64_t*>(u.keys)[i];
  }
}

GEARJAX_HD double GpuUpdatePriority(const GpuUpdate& u, int64_t i) {
  if (u.priority_format == PriorityFormat::kFloat64) {
    return static_cast<const double*>(u.priorities)[i];
  }
  return Float32ToDouble(static_cast<const uint32_t*>(u.priorities)[i]);
}

// A record's key if its state says live, else -1, state first
// (live_record.h): never the key of the item evicted before. The host writes
// records while the kernel runs.
GEARJAX_HD int64_t GpuUpdateLiveKey(const SlotInfo& info) {
  return LoadLiveState(info) ? LoadRecordField(info.key) : -1;
}

// Slots::Find at device addresses.
GEARJAX_HD int64_t GpuUpdateFind(const GpuUpdate& u, int64_t key) {
  if (key < 0) return -1;
  const int64_t slot = key & u.slot_mask;
  if (slot >= u.capacity) return -1;
  return GpuUpdateLiveKey(u.info[slot]) == key ? slot : -1;
}

// Where `slot` sits in the hash table (linear probing from a multiplicative
// hash); inserts it when `insert` and absent. -1 when absent and not inserted.
GEARJAX_HD int64_t GpuUpdateHashPlace(const GpuUpdateShared& s, int32_t slot, bool insert) {
  const uint64_t mask = static_cast<uint64_t>(s.hash_size) - 1;
  uint64_t place = (static_cast<uint64_t>(static_cast<uint32_t>(slot)) * 0x9E3779B97F4A7C15ull) >> 40;
  for (;;) {
    place &= mask;
    const int32_t held = insert ? update_atomic::Cas(&s.hash_slot[place], -1, slot)
                                : s.hash_slot[place];
    if (held == slot || (insert && held == -1)) return static_cast<int64_t>(place);
    if (held == -1) return -1;
    ++place;
  }
}

// Phase 0, before the check: the hash table empty, the counters zero.
GEARJAX_HD void GpuUpdateClear(const GpuUpdate& u, const GpuUpdateShared& s, int64_t t,
                               int64_t threads) {
  for (int64_t h = t; h < s.hash_size; h += threads) {
    s.hash_slot[h] = -1;
    s.hash_last[h] = -1;
  }
  if (t == 0) {
    *s.first_bad = u.n;
    *s.live = *s.skipped = 0;
    *s.positive = 0;
  }
}

// Phase 0, with the clearing (see the top): a deferred slot's leaf from its
// record (live, as every deferred slot is while the kernel may run, else 0).
GEARJAX_HD void GpuUpdateDeferredLeaves(const GpuUpdate& u, int64_t t, int64_t threads) {
  for (int64_t j = t; j < u.deferred_n; j += threads) {
    const int64_t slot = u.deferred[j];
    const SlotInfo& info = u.info[slot];
    const bool live = GpuUpdateLiveKey(info) >= 0;
    for (int32_t k = 0; k < u.trees; ++k) {
      GpuUpdateWrite(u.tree[k], u.offsets[0] + slot,
                     live ? PriorityWeight(info.priority, u.tree[k].alpha) : 0.0);
    }
  }
}

// Phase 1 (see the top).
GEARJAX_HD void GpuUpdateCheck(const GpuUpdate& u, const GpuUpdateShared& s, int64_t t,
                               int64_t threads) {
  unsigned long long live = 0, skipped = 0;
  for (int64_t i = t; i < u.n; i += threads) {
    if (!ValidPriority(GpuUpdatePriority(u, i))) update_atomic::Min(s.first_bad, i);
    const int64_t key = GpuUpdateKey(u, i);
    const int64_t slot = GpuUpdateFind(u, key);
    s.slot[i] = static_cast<int32_t>(slot);
    if (slot < 0) {
      skipped += key >= 0 ? 1 : 0;
      continue;
    }
    ++live;
    update_atomic::Max(&s.hash_last[GpuUpdateHashPlace(s, static_cast<int32_t>(slot), true)],
                       static_cast<int32_t>(i));
  }
  if (live > 0) update_atomic::Add(s.live, live);
  if (skipped > 0) update_atomic::Add(s.skipped, skipped);
}

// Phase 2, when every priority is good: each slot's last entry sets the
// record and the leaves; other entries are dropped (slot -1).
GEARJAX_HD void GpuUpdateLeaves(const GpuUpdate& u, const GpuUpdateShared& s, int64_t t,
                                int64_t threads) {
  long long positive = 0;
  for (int64_t i = t; i < u.n; i += threads) {
    const int32_t slot = s.slot[i];
    if (slot < 0) continue;
    if (s.hash_last[GpuUpdateHashPlace(s, slot, false)] != i) {
      s.slot[i] = -1;
      continue;
    }
    const double priority = GpuUpdatePriority(u, i) + 0.0;  // -0.0 -> 0.0
    SlotInfo& info = u.info[slot];
    positive += (priority > 0 ? 1 : 0) - (info.priority > 0 ? 1 : 0);
    info.priority = priority;
    for (int32_t k = 0; k < u.trees; ++k) {
      GpuUpdateWrite(u.tree[k], u.offsets[0] + slot, PriorityWeight(priority, u.tree[k].alpha));
    }
  }
  if (positive != 0) update_atomic::Add(reinterpret_cast<unsigned long long*>(s.positive),
                                        static_cast<unsigned long long>(positive));
}

// The ancestor at `level` of `slot`'s leaf, summed again from its children.
GEARJAX_HD void GpuUpdateParent(const GpuUpdate& u, int64_t slot, int32_t level) {
  const int64_t node = slot >> (3 * level);  // eight children a node
  for (int32_t k = 0; k < u.trees; ++k) {
    const double* below = u.tree[k].nodes + u.offsets[level - 1] + node * kSumTreeFanout;
    GpuUpdateWrite(u.tree[k], u.offsets[level] + node, SumTreeLineSum(below));
  }
}

// Phase 3, once per level from 1 to levels - 1, after the level below: the
// ancestors of the deferred leaves and, when the update's priorities were
// good (`applied`), of the leaves it set.
GEARJAX_HD void GpuUpdateParents(const GpuUpdate& u, const GpuUpdateShared& s, int32_t level,
                                 bool applied, int64_t t, int64_t threads) {
  for (int64_t i = t; applied && i < u.n; i += threads) {
    if (s.slot[i] >= 0) GpuUpdateParent(u, s.slot[i], level);
  }
  for (int64_t j = t; j < u.deferred_n; j += threads) GpuUpdateParent(u, u.deferred[j], level);
}
static_assert(kSumTreeFanout == 8, "GpuUpdateParents shifts by 3 bits a level");

// Phase 4, by one thread once every other phase is done: the report, the
// result, the ticket.
GEARJAX_HD void GpuUpdateFinish(const GpuUpdate& u, const GpuUpdateShared& s) {
  GpuUpdateReport* r = u.report;
  if (*s.first_bad < u.n) {
    update_report::HoldDetails(r, *s.first_bad, GpuUpdatePriority(u, *s.first_bad));
#ifdef __CUDA_ARCH__
    __threadfence_system();  // the entry and value before the count that announces them
#else
    __atomic_thread_fence(__ATOMIC_RELEASE);
#endif
    update_report::Add(&r->failed, 1);
    *u.updated = -1;
  } else {
    update_report::Add(&r->updated, *s.live);
    update_report::Add(&r->skipped, *s.skipped);
    update_report::Add(&r->positive, static_cast<unsigned long long>(*s.positive));
    *u.updated = static_cast<int32_t>(*s.live);
  }
  CompleteBlock(u.completion, 1);
}

// The kernel's phases on the CPU, thread by thread, a barrier between
// phases as the kernel has (`shared`: GpuUpdateSharedBytes(u.n)).
inline void EmulateGpuUpdate(const GpuUpdate& u, void* shared, int64_t threads) {
  const GpuUpdateShared s = CarveGpuUpdateShared(shared, u.n);
  for (int64_t t = 0; t < threads; ++t) {
    GpuUpdateClear(u, s, t, threads);
    GpuUpdateDeferredLeaves(u, t, threads);
  }
  for (int64_t t = 0; t < threads; ++t) GpuUpdateCheck(u, s, t, threads);
  const bool applied = *s.first_bad == u.n;
  if (applied) {
    for (int64_t t = 0; t < threads; ++t) GpuUpdateLeaves(u, s, t, threads);
  }
  for (int32_t level = 1; level < u.levels; ++level) {
    for (int64_t t = 0; t < threads; ++t) GpuUpdateParents(u, s, level, applied, t, threads);
  }
  GpuUpdateFinish(u, s);
}

}  // namespace gearjax
