// The selector interface. A selector is a structure that chooses live items,
// for sampling (Uniform, Timestep, Prioritized, TopK, Recent) or for removal
// (FIFO, LIFO, min-priority), in Reverb's vocabulary. The table tells every
// selector it keeps about each item that becomes live, leaves, or changes
// priority, always under its lock; each selector answers its own typed
// queries (see uniform.h, prioritized.h, fifo.h, heap.h).
//
// A table creates the selectors a strategy needs when a sample with that
// strategy is first admitted, and keeps them up to date from then on, so a
// table pays only for the selection it uses. The selectors users choose
// (SamplingSelector) also draw: the table asks the strategy's selector for a
// batch (the strategy registry's factory makes each strategy's selector,
// strategies.h; the table keeps them in a SelectorSet, selector_set.h) and
// never switches on the strategy to select.
#pragma once

#include <cstdint>
#include <vector>

#include "core/selectors/sum_tree.h"

namespace gearjax {

struct GpuSelection;  // gpu_selection.h
struct SlotInfo;      // slots.h

// What a selector may key on: a live item's slot, key, length and priority.
struct Item {
  int64_t slot;
  int64_t key;
  int64_t length;
  double priority;
};

// One drawn row: the slot, the probability with which it was drawn, and for
// selectors that draw steps (step_prioritized.h) the step that places its
// window (-1: the cut places it).
struct Selection {
  int64_t slot;
  double probability;
  int64_t step = -1;
};

class Selector {
 public:
  virtual ~Selector() = default;
  virtual void Insert(const Item& item) = 0;
  virtual void Delete(const Item& item) = 0;
  // Whether UpdatePriorities does anything (the table skips the others).
  virtual bool UsesPriority() const { return false; }
  // Live items change priority: before[i] holds item i with its old priority,
  // priorities[i] is its new one. A slot may appear more than once; its last
  // entry wins, and each entry's `before` holds the priority the previous
  // entry set.
  virtual void UpdatePriorities(const Item* before, const double* priorities, int64_t n) {
    (void)before;
    (void)priorities;
    (void)n;
  }
  // Makes the scratch an UpdatePriorities of up to n items grows, so that
  // call allocates none: the table reserves before an update writes anything,
  // so one too large for memory (std::bad_alloc) changes nothing. Node-based
  // structures (TopK's ranking) still allocate a node an item.
  virtual void ReserveUpdates(int64_t n) { (void)n; }
};

// What a sampling selector draws a batch from: the batch's seed and each
// row's attempt-0 uniform (u[b] for row b of n), the strategy's count (TopK's
// k, Recent's n), and the slot records each drawn slot's row reads next
// (prefetched by tree descents as soon as the slot is known).
struct SelectionBatch {
  const uint32_t* seed;  // two words
  const double* u;
  int64_t n;
  int64_t count;
  LeafPrefetch then;
};

// What a constrained sample lists (Table::CandidatesLocked): the table's
// slot records, and what makes a live item eligible: at least `full_window`
// steps (cut="full"; 0: any length), among the best `count` for TopK and
// Recent.
struct CandidateScan {
  const SlotInfo* slots;  // `capacity` of them
  int64_t capacity;
  int64_t full_window;
  int64_t count;
};

// An item a constrained sample may draw: its weight under the strategy,
// and the draws this batch may take of it (set by the table: the selector
// that lists it leaves 0).
struct Candidate {
  int64_t slot;
  double weight;   // > 0
  int64_t budget;  // >= 1 draws this batch may take of it
};

// A selector users choose (Uniform, Timestep, Prioritized, TopK, Recent).
class SamplingSelector : public Selector {
 public:
  // Draws batch.n rows into out, each with the probability it was drawn
  // with; the table holds at least one item this selector can draw.
  virtual void SelectMany(const SelectionBatch& batch, Selection* out) const = 0;
  // The sum of the weights a draw is in proportion to (what a sharded sample
  // draws this table's share by): the draw tree's total (Uniform: its
  // size); never asked of ranking selectors.
  virtual double TotalWeight() const {
    const SumTree* tree = DrawTree();
    return tree != nullptr ? tree->Total() : 0.0;
  }
  // The sum tree a draw descends (what one-sided readers of other processes
  // descend too), or null for selectors that rank instead (TopK, Recent).
  virtual const SumTree* DrawTree() const { return nullptr; }
  // The slots of the min(count, size) best items, the best first, for
  // selectors that rank (TopK, Recent: what a sharded sample merges across
  // shards); empty for those that weigh instead.
  virtual std::vector<int64_t> Best(int64_t count) const {
    (void)count;
    return {};
  }
  // Fills the strategy's part of what the GPU selection kernel reads (the
  // live bitmap, or the sum tree, at device addresses); false for selectors
  // that select on the host only.
  virtual bool DescribeForGpu(GpuSelection* selection) const {
    (void)selection;
    return false;
  }
  // Appends the items a constrained sample may draw, with their weights, in
  // the order the draw takes them: slot order, or best first for TopK and
  // Recent, which list their best `count` eligible items only.
  virtual void ListCandidates(const CandidateScan& scan, std::vector<Candidate>* out) const = 0;
  // Rows a constrained sample drew among ListCandidates' items: a selector
  // that draws steps chooses each row's step within its item (u[b], a
  // uniform a row) and scales its probability; others leave them.
  virtual void PlaceDrawnSteps(const SlotInfo* slots, int64_t full_window, const double* u,
                               Selection* rows, int64_t n) const {
    (void)slots;
    (void)full_window;
    (void)u;
    (void)rows;
    (void)n;
  }
};

// A uniform index in [0, n) from u in [0, 1): the rank TopK and Recent draw.
inline int64_t UniformIndex(double u, int64_t n) {
  const int64_t i = static_cast<int64_t>(u * static_cast<double>(n));
  return i < n ? i : n - 1;
}

}  // namespace gearjax
