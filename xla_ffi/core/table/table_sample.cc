// Table's samples (see table.h): request checks, waits on the rate limiter,
// selection and sample tickets (a GPU sample's begin: table_gpu_sample.cc).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "core/limits.h"
#include "core/prefetch.h"
#include "core/random.h"
#include "core/row_words_cpu.h"
#include "core/table/table.h"
#include "core/table/table_internal.h"

namespace gearjax {

using table_internal::Number;

void Table::CheckRequest(const SampleRequest& r) const {
  if (r.batch < 1 || r.batch > kMaxBatch) {
    throw InvalidArgument("batch_size must be in [1, 2**31 - 1], got " + std::to_string(r.batch));
  }
  if (r.window < 0 || r.window > spec_.max_length) {
    throw InvalidArgument("window must be in [1, max_length=" + std::to_string(spec_.max_length) +
                          "] (or whole trajectories)");
  }
  if (static_cast<int32_t>(r.cut) < 0 || static_cast<int32_t>(r.cut) >= kNumCuts) {
    throw InvalidArgument("unknown window cut " + std::to_string(static_cast<int32_t>(r.cut)));
  }
  CheckParameters(r);
  if (DrawsSteps(r.strategy)) {
    if (!spec_.step_priorities) {
      throw InvalidArgument("PrioritizedSteps draws steps by their own priorities: make the "
                            "table with step_priorities=True");
    }
    if (r.window == 0) {
      throw InvalidArgument("PrioritizedSteps places a window at the drawn step: give a window");
    }
  }
}

void Table::WaitToSampleLocked(MutexLock& lock, const SampleRequest& r) {
  CheckOpenLocked();
  if (!limiter_.CanSample(LimiterStateLocked(), r.batch)) {
    const double timeout = spec_.limiter.timeout_seconds;
    const auto admitted = [&] {
      mu_.AssertHeld();
      return limiter_.CanSample(LimiterStateLocked(), r.batch);
    };
    if (!WaitWithinLimiterTimeoutLocked(
            lock, admitted,
            "a sample of " + std::to_string(r.batch) + " rows held back by the rate limiter")) {
      if (live_ == 0 && timeout == 0) {
        // Both a table without a rate limiter and one whose limiter has
        // timeout 0 land here: the message fits both.
        throw Shortfall("cannot sample: the table is empty, and sampling does not wait for "
                        "inserts here (the table has no rate limiter, or its limiter's timeout "
                        "is 0): insert trajectories first, or give the table a rate limiter with "
                        "a timeout > 0, e.g. MinSize(1, timeout=60), to wait for them");
      }
      throw Timeout("cannot sample " + std::to_string(r.batch) + " items: the rate limiter held "
                    "sampling back for " + Number(timeout) + " s (" +
                    limiter_.Describe(LimiterStateLocked()) + ")");
    }
  }
  // Checked before SamplingSelectorLocked may make a tree, so a refused sample
  // takes no alpha's place.
  if (WeighsByPriority(r) && PositiveLocked() == 0) {
    // A trajectory's priority is the largest of its steps': none positive,
    // no step is either.
    throw InvalidArgument(std::string("cannot sample with ") + StrategyOf(r.strategy).name +
                          ": every stored " + (DrawsSteps(r.strategy) ? "step" : "trajectory") +
                          " has priority 0");
  }
}

void Table::SelectLocked(const SampleRequest& r, const uint32_t seed[2], const double* u,
                         Selection* out) {
  // Select reads each drawn slot's record next: tree draws prefetch it.
  const LeafPrefetch records{&(*slots_)[0], sizeof(SlotInfo)};
  SamplingSelectorLocked(r).SelectMany({seed, u, r.batch, r.count, records}, out);
}

uint64_t Table::Select(const SampleRequest& r, const uint32_t seed[2], Draw* draws) {
  CheckRequest(r);
  const int64_t n = r.batch;
  // The random words depend on the seed alone: expand them outside the lock,
  // into buffers this thread reuses (no allocation per call).
  thread_local std::vector<Words4> words;
  thread_local std::vector<double> u;
  thread_local std::vector<Selection> selections;
  words.resize(static_cast<size_t>(n));
  u.resize(static_cast<size_t>(n));
  selections.resize(static_cast<size_t>(n));
  RowWordsMany(seed, n, words.data());
  MutexLock lock(CheckedMutex());
  const bool constrained = Constrained(r);
  // The ticket is taken in the hold of the lock the rows were drawn in, so
  // nothing they name changes before it covers them, and nothing is counted
  // or removed for a sample that fails. Where its place is still held (a GPU
  // stream far behind), the rows are drawn again after the wait.
  DrawForTicketLocked(lock, r, [&] {
    mu_.AssertHeld();
    // Draws read (and max_times_sampled removals write) the priority trees.
    OwnPrioritiesLocked();
    for (int64_t b = 0; b < n; ++b) u[b] = UniformFromBits(words[b].w[0], words[b].w[1]);
    const bool fast_full = SelectFastFullLocked(r, seed, u.data(), selections.data());
    if (constrained && !fast_full) {
      SelectConstrainedLocked(lock, r, words.data(), u.data(), selections.data());
    } else if (!fast_full) {
      SelectLocked(r, seed, u.data(), selections.data());
    }
  });
  // The one Take gives below: the newest, so writers reusing a slot this
  // sample removes wait for every sample that may still read it.
  const uint64_t ticket = tickets_.next();
  FillDrawsLocked(r, words.data(), selections.data(), draws);
  // After every row has its table size: the draws that use up an item's
  // max_times_sampled remove it now (its data stays readable until the
  // sample ends: see freed_at_).
  if (constrained) {
    for (int64_t b = 0; b < n; ++b) CountDrawLocked(selections[b].slot, ticket);
  }
  counters_.samples += static_cast<double>(n);
  changed_.notify_all();  // inserters and other samplers may be waiting
  return tickets_.Take();
}

void Table::SelectConstrainedLocked(MutexLock& lock, const SampleRequest& r, const Words4* words,
                                    double* u, Selection* out) {
  const int64_t n = r.batch;
  int64_t servable = CandidatesLocked(r);
  if (servable < n) {
    const double timeout = spec_.limiter.timeout_seconds;
    // Too few items and no waiting: a Shortfall, as an empty table is.
    if (timeout == 0) {
      throw Shortfall(ShortfallLocked(r, servable) + " (sampling does not wait here: the table "
                      "has no rate limiter, or its timeout is 0)");
    }
    const auto servable_now = [&] {
      mu_.AssertHeld();
      if (!limiter_.CanSample(LimiterStateLocked(), n)) return false;
      servable = CandidatesLocked(r);
      return servable >= n;
    };
    if (!WaitWithinLimiterTimeoutLocked(
            lock, servable_now,
            "a sample of " + std::to_string(n) + " rows waiting for items it may draw")) {
      char waited[32];
      std::snprintf(waited, sizeof(waited), "%g", timeout);
      throw Timeout(ShortfallLocked(r, servable) + " (waited " + waited + " s)");
    }
  }
  constrained_.Draw(candidates_, u, n, out);
  // A selector that draws steps chooses each row's within its item, from
  // the words the cut would take (it places the window instead).
  for (int64_t b = 0; b < n; ++b) u[b] = UniformFromBits(words[b].w[2], words[b].w[3]);
  SamplingSelectorLocked(r).PlaceDrawnSteps(&(*slots_)[0], r.cut == Cut::kFull ? r.window : 0, u,
                                            out, n);
}

void Table::FillDrawsLocked(const SampleRequest& r, const Words4* words,
                            const Selection* selections, Draw* draws) const {
  const int64_t n = r.batch;
  // Slot records prefetched ahead of the one read: far enough for a miss to
  // memory (and its TLB miss) to finish, as each record takes little work.
  constexpr int64_t kAhead = 32;
  for (int64_t b = 0; b < std::min(n, kAhead); ++b) {
    if (selections[b].slot >= 0) PrefetchForRead(&(*slots_)[selections[b].slot]);
  }
  for (int64_t b = 0; b < n; ++b) {
    if (b + kAhead < n && selections[b + kAhead].slot >= 0) {
      PrefetchForRead(&(*slots_)[selections[b + kAhead].slot]);
    }
    if (selections[b].slot < 0) {
      throw std::logic_error("gearjax: the selection structures are inconsistent (a bug)");
    }
    const int64_t slot = selections[b].slot;
    const SlotInfo& info = (*slots_)[slot];
    Draw& d = draws[b];
    d.slot = slot;
    d.key = info.key;
    d.length = info.length;
    const WindowCut cut =
        selections[b].step >= 0
            ? WindowAtStep(r.cut, d.length, r.window, selections[b].step)
            : CutWindow(r.cut, d.length, r.window, words[b].w[2], words[b].w[3]);
    d.start = cut.start;
    d.valid = cut.valid;
    d.table_size = live_;
    d.probability = static_cast<float>(selections[b].probability);
  }
}

int64_t Table::CandidatesLocked(const SampleRequest& r) {
  candidates_.clear();
  const int64_t limit = spec_.max_times_sampled;
  auto budget = [&](int64_t slot) {
    mu_.AssertHeld();
    const int64_t left = limit > 0 ? limit - times_sampled_[slot] : r.batch;
    return r.replace ? left : std::min<int64_t>(left, 1);
  };
  // The strategy's selector lists the eligible items with their weights:
  // slot order (a sequential scan of the slot records; like every draw,
  // dependent on which slots hold what rather than on history), or TopK's
  // and Recent's best `count` first (an item left out has weight 0).
  const int64_t full_window = r.cut == Cut::kFull && r.window > 0 ? r.window : 0;
  SamplingSelectorLocked(r).ListCandidates({&(*slots_)[0], spec_.capacity, full_window, r.count},
                                           &candidates_);
  for (Candidate& c : candidates_) c.budget = budget(c.slot);
  return TotalBudget(candidates_, r.batch);
}

std::string Table::ShortfallLocked(const SampleRequest& r, int64_t servable) const {
  std::string what = "cannot sample " + std::to_string(r.batch) + " rows";
  std::string why;
  if (r.cut == Cut::kFull) {
    why += "trajectories of at least window=" + std::to_string(r.window) + " steps (cut='full')";
  } else {
    why += "trajectories";
  }
  why += EligibleWords(r);
  std::string limits;
  if (!r.replace) limits += "replace=False draws each at most once";
  if (spec_.max_times_sampled > 0) {
    limits += std::string(limits.empty() ? "" : "; ") + "max_times_sampled=" +
              std::to_string(spec_.max_times_sampled) + " limits each trajectory's draws";
  }
  return what + ": the table holds " + std::to_string(live_) + " trajectories, and the " + why +
         " among them can serve only " + std::to_string(servable) + " draws" +
         (limits.empty() ? "" : " (" + limits + ")");
}

void Table::EndSample(uint64_t ticket) {
  tickets_.Return(ticket);
  // Without mu_ (see tickets_): a waiter that misses this wakes within its
  // slice (WaitForTickets).
  changed_.notify_all();
}

}  // namespace gearjax
