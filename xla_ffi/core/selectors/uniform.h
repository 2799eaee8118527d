// Uniform(): draws every live trajectory with the same probability
// (Timestep, by length, is in timestep.h).
//
// Uniform keeps a bitmap of live slots and
// draws by rejection: a slot uniform in [0, capacity), kept if live, else
// another with the row's next attempt words (random.h), up to
// kUniformAttempts; a row that finds no live slot that way (a table mostly
// empty) descends a sum tree of ones instead. Either way every live slot has
// probability 1 / size, and a draw depends only on which slots are live, never
// on the order they became so: a table restored from a checkpoint (slot layout
// included) draws exactly what the saved one drew, and the GPU selection
// (select_block.h) reads the same bitmap and tree with the same code.
#pragma once

#include <cstdint>
#include <vector>

#include "core/common.h"
#include "core/gpu/mapped_array.h"
#include "core/random.h"
#include "core/selectors/selector.h"
#include "core/selectors/sum_tree.h"

namespace gearjax {

inline constexpr uint32_t kUniformAttempts = 16;

// What a Uniform draw reads (host or device addresses).
struct UniformView {
  const uint64_t* live;  // bit s of word s / 64: slot s is live
  int64_t capacity;
  SumTreeView ones;      // the fallback: weight 1 per live slot
};

// The slot of one Uniform row: `u` is the row's attempt-0 uniform; later
// attempts take their own words. Returns -1 only for an empty table.
GEARJAX_HD int64_t UniformDraw(const UniformView& v, const uint32_t seed[2], int64_t row,
                               double u) {
  const double capacity = static_cast<double>(v.capacity);
  for (uint32_t attempt = 0; attempt < kUniformAttempts; ++attempt) {
    if (attempt > 0) {
      const Words4 w = AttemptWords(seed, row, attempt);
      u = UniformFromBits(w.w[0], w.w[1]);
    }
    int64_t slot = static_cast<int64_t>(u * capacity);
    slot = slot < v.capacity ? slot : v.capacity - 1;
    if ((v.live[slot >> 6] >> (slot & 63)) & 1) return slot;
  }
  const Words4 w = AttemptWords(seed, row, kUniformAttempts);
  return SumTreeDraw(v.ones, UniformFromBits(w.w[0], w.w[1]));
}

class UniformSelector final : public SamplingSelector {
 public:
  UniformSelector(int64_t capacity, bool gpu_mapped);
  void Insert(const Item& item) override;
  void Delete(const Item& item) override;

  int64_t size() const { return size_; }
  // Row b of n (b = 0..n-1) draws with u[b], its attempt-0 uniform from the
  // seed (UniformDraw).
  void SelectMany(const SelectionBatch& batch, Selection* out) const override;
  const SumTree* DrawTree() const override { return &ones_; }
  double TotalWeight() const override { return static_cast<double>(size_); }
  bool DescribeForGpu(GpuSelection* selection) const override;
  // Every eligible live item, weight 1, in slot order.
  void ListCandidates(const CandidateScan& scan, std::vector<Candidate>* out) const override;
  UniformView view() const { return {live_.data(), capacity_, ones_.view()}; }
  // The weight-1-per-live-slot tree (what one-sided readers descend).
  const SumTree& ones() const { return ones_; }
  // At the GPU's addresses (live == nullptr when not GPU-mapped).
  UniformView device_view() const { return {live_.device_data(), capacity_, ones_.device_view()}; }

 private:
  int64_t capacity_;
  int64_t size_ = 0;
  MappedArray<uint64_t> live_;
  SumTree ones_;
};

}  // namespace gearjax
