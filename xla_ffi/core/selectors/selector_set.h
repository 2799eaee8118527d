// The selectors a table keeps, held in one place. Sampling selectors are made
// by the strategy registry's factory (strategies.h) when a sample first asks
// for their strategy, one per alpha for strategies that weigh by priority,
// and are found again by (strategy, alpha); so a new strategy adds an entry
// to the registry, never a member to the table. The selectors no strategy
// draws from (the insertion order, the min-priority remover's heap, the
// length index and the length buckets) are kept here too, so that the table tells every selector
// each change through one list (all()).
//
// Not thread-safe: the table holds its mutex around every call.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/sample_request.h"
#include "core/selectors/selector.h"
#include "core/selectors/strategies.h"

namespace gearjax {

// One strategy's selectors as their own type S (the type the registry's
// factory makes for it), in the order they were made.
template <typename S>
class SelectorsOf {
 public:
  class iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = S*;
    using difference_type = std::ptrdiff_t;
    using pointer = S* const*;
    using reference = S*;

    explicit iterator(SamplingSelector* const* at) : at_(at) {}
    S* operator*() const { return static_cast<S*>(*at_); }
    iterator& operator++() {
      ++at_;
      return *this;
    }
    iterator operator++(int) {
      iterator before = *this;
      ++at_;
      return before;
    }
    bool operator==(const iterator& other) const { return at_ == other.at_; }
    bool operator!=(const iterator& other) const { return at_ != other.at_; }

   private:
    SamplingSelector* const* at_;
  };

  explicit SelectorsOf(const std::vector<SamplingSelector*>& made) : made_(&made) {
    static_assert(std::is_base_of_v<SamplingSelector, S>, "S must be a sampling selector");
#ifndef NDEBUG
    for (SamplingSelector* selector : made) assert(dynamic_cast<S*>(selector) != nullptr);
#endif
  }
  iterator begin() const { return iterator(made_->data()); }
  iterator end() const { return iterator(made_->data() + made_->size()); }
  bool empty() const { return made_->empty(); }
  size_t size() const { return made_->size(); }

 private:
  const std::vector<SamplingSelector*>* made_;
};

class SelectorSet {
 public:
  SelectorSet();

  // The selector a sample with `strategy` (and `alpha`, for strategies that
  // weigh by priority) draws from, or null where none was made yet. Throws
  // InvalidArgument for an unknown strategy.
  SamplingSelector* Find(Strategy strategy, double alpha) const;

  // Makes, empty, the selector Find would return (the registry's factory);
  // throws InvalidArgument where the factory refuses (a strategy this table
  // cannot serve) or where it would be one more than kMaxPriorityTrees of a
  // strategy that weighs by priority, naming the alphas kept. Keeps nothing:
  // the caller fills it, then hands it to Add.
  std::unique_ptr<SamplingSelector> Make(Strategy strategy, double alpha,
                                         const SelectorContext& context) const;

  // Keeps a filled selector made by Make(strategy, alpha, ...); returns it.
  SamplingSelector& Add(Strategy strategy, double alpha,
                        std::unique_ptr<SamplingSelector> selector);

  // Keeps a selector no strategy draws from; returns it.
  template <typename S>
  S& Keep(std::unique_ptr<S> selector) {
    S& kept = *selector;
    Own(std::move(selector));
    return kept;
  }

  // `strategy`'s selectors (one per alpha kept, or at most one).
  template <typename S>
  SelectorsOf<S> Of(Strategy strategy) const {
    return SelectorsOf<S>(made_[Index(strategy)]);
  }
  bool Has(Strategy strategy) const { return !made_[Index(strategy)].empty(); }
  size_t CountOf(Strategy strategy) const { return made_[Index(strategy)].size(); }
  // Whether `selector` is one of `strategy`'s.
  bool Holds(Strategy strategy, const Selector* selector) const;

  // Every selector kept, in the order kept; those whose UsesPriority().
  const std::vector<Selector*>& all() const { return all_; }
  const std::vector<Selector*>& using_priority() const { return using_priority_; }

  // Moves every selector out, the last kept first (the table's Close frees
  // them once it has released its mutex); the set is then empty.
  std::vector<std::shared_ptr<void>> TakeAll();

 private:
  static size_t Index(Strategy strategy) { return static_cast<size_t>(strategy); }
  // The alpha a selector of the strategy is keyed by: its own for those that
  // weigh by priority, else none (0).
  static double KeyOf(const StrategyEntry& entry, double alpha) {
    return entry.weighs_by_priority ? alpha : 0.0;
  }
  void Own(std::unique_ptr<Selector> selector);

  std::vector<std::unique_ptr<Selector>> owned_;
  // Per strategy code: its selectors, and the alpha each is keyed by.
  std::vector<std::vector<SamplingSelector*>> made_;
  std::vector<std::vector<double>> keys_;
  std::vector<Selector*> all_;
  std::vector<Selector*> using_priority_;
};

}  // namespace gearjax
